//! CUDA arrays and texture and surface objects (backend protocol 16) through the SDK, as the
//! CUDA shim makes them, with the checks the backend makes itself (a client other than the shim
//! sends what it likes).

use ac_frontend::{Accelerator, ArrayCopy, ArrayId, ArraySpec, DevicePtr, ErrorKind, Sampler, TextureResource};

/// A 16 x 8 array of floats.
const FLOATS: ArraySpec = ArraySpec { width: 16, height: 8, depth: 0, format: 0x20, channels: 1, flags: 0 };

/// How a point-sampled, clamped texture reads.
const POINT: Sampler = Sampler {
    address_modes: [1; 3],
    filter_mode: 0,
    flags: 0,
    max_anisotropy: 0,
    mipmap_filter_mode: 0,
    mipmap_level_bias: 0.0,
    min_mipmap_level_clamp: 0.0,
    max_mipmap_level_clamp: 0.0,
    border_color: [0.0; 4],
};

/// The copy between the region of `extent` at an array's origin and linear memory at `linear`
/// holding it packed (rows and slices one after another).
fn packed(array: ArrayId, extent: [u64; 3], linear: DevicePtr, to_array: bool) -> ArrayCopy {
    ArrayCopy { array, origin: [0; 3], extent, linear, pitch: extent[0], slice_rows: extent[1], to_array }
}

/// A new array reads zero (a GPU's memory holds whatever it held last), one cleared in one band
/// of rows and one in several; bytes copied in from a buffer come back out; the backend refuses by name a region past the array, a linear side
/// past its buffer, a misshapen array, a texture past its buffer, an array of another session
/// (or none) and objects that are not the session's; the sessions go on. `other` is a second
/// session on the same device.
pub async fn arrays_reach_only_the_sessions_memory(acc: &Accelerator, other: &Accelerator) {
    let stream = acc.default_stream();
    // 100 rows of 16 KiB: cleared in bands of 64 rows (1 MiB).
    let tall = ArraySpec { width: 4096, height: 100, ..FLOATS };
    let big = acc.create_array(tall).await.unwrap();
    let read = acc.alloc_from(&vec![7.0f32; 4096 * 100]).await.unwrap();
    let all = packed(big.id(), [16384, 100, 1], read.device_ptr(0), false);
    acc.copy_array(&stream, all).await.unwrap();
    stream.synchronize().await.unwrap();
    assert!(read.to_vec().await.unwrap().iter().all(|&v| v == 0.0), "an array cleared in several bands reads zero");
    drop((big, read));
    let theirs = other.create_array(FLOATS).await.unwrap(); // its id in its session: 1
    let _first = acc.create_array(FLOATS).await.unwrap();
    let array = acc.create_array(FLOATS).await.unwrap(); // 3 here: the other session has no such array
    let whole = |array: ArrayId, linear, to_array| packed(array, [64, 8, 1], linear, to_array);
    let out = acc.alloc_from(&[7.0f32; 128]).await.unwrap();
    acc.copy_array(&stream, whole(array.id(), out.device_ptr(0), false)).await.unwrap();
    stream.synchronize().await.unwrap();
    assert_eq!(out.to_vec().await.unwrap(), vec![0.0f32; 128], "a new array reads zero");
    let pattern: Vec<f32> = (0..128).map(|i| i as f32 * 1.5).collect();
    let input = acc.alloc_from(&pattern).await.unwrap();
    acc.copy_array(&stream, whole(array.id(), input.device_ptr(0), true)).await.unwrap();
    acc.copy_array(&stream, whole(array.id(), out.device_ptr(0), false)).await.unwrap();
    stream.synchronize().await.unwrap();
    assert_eq!(out.to_vec().await.unwrap(), pattern, "in and out of the array");

    let refused = [
        (ArrayCopy { origin: [4, 0, 0], ..whole(array.id(), out.device_ptr(0), true) }, "lies outside an array"),
        (whole(array.id(), out.device_ptr(4), true), "outside buffer"),
        (
            ArrayCopy { origin: [2, 0, 0], extent: [4, 1, 1], ..whole(array.id(), out.device_ptr(0), true) },
            "cuts elements",
        ),
        (whole(ArrayId(u64::MAX), out.device_ptr(0), true), "no array"),
    ];
    for (copy, why) in refused {
        acc.copy_array(&stream, copy).await.unwrap();
        let err = stream.synchronize().await.unwrap_err();
        assert!(err.to_string().contains(why), "{copy:?}: {err}");
    }
    let err = acc.create_array(ArraySpec { channels: 3, ..FLOATS }).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidArgument), "{err}");
    let past = TextureResource::Linear { address: out.device_ptr(256), format: 0x20, channels: 1, bytes: 512 };
    let err = acc.create_texture(past, POINT).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::OutOfBounds), "{err}");

    // Another session names this one's array: it has none of that number.
    let err = other.create_texture(TextureResource::Array(array.id()), POINT).await.unwrap_err();
    assert!(err.to_string().contains("no array"), "{err}");
    let texture = acc.create_texture(TextureResource::Array(array.id()), POINT).await.unwrap();
    assert_ne!(texture.value(), 0, "a texture object's value");
    // Objects and arrays go when dropped: the array outlives its handle while the texture reads it.
    drop(array);
    let fresh = acc.create_array(FLOATS).await.unwrap();
    drop(texture);
    drop(fresh);
    assert_eq!(input.to_vec().await.unwrap(), pattern, "the session goes on");
    let mine = other.alloc_from(&[2.5f32; 128]).await.unwrap();
    let on = other.default_stream();
    other.copy_array(&on, whole(theirs.id(), mine.device_ptr(0), true)).await.unwrap();
    on.synchronize().await.unwrap();
}

/// A 1-D layered array (`CUDA_ARRAY3D_LAYERED`: no rows, `depth` layers of one row each) takes
/// every layer in from linear memory and gives them back out exactly, queued on one stream; its
/// handle dropped before the copies have run, it goes after them.
pub async fn layered_arrays_take_and_give_back_every_layer(acc: &Accelerator) {
    let stream = acc.default_stream();
    // 64 layers of 4,096 floats (1 MiB): the copies are still queued when the handle goes.
    let spec = ArraySpec { width: 4096, height: 0, depth: 64, flags: 0x01, ..FLOATS };
    let layered = acc.create_array(spec).await.unwrap();
    let pattern: Vec<f32> = (0..4096 * 64).map(|i| i as f32 * 0.25).collect();
    let input = acc.alloc_from(&pattern).await.unwrap();
    let out = acc.alloc_from(&vec![0f32; 4096 * 64]).await.unwrap();
    let layers = |linear, to_array| packed(layered.id(), [16384, 1, 64], linear, to_array);
    let (copy_in, copy_out) = (layers(input.device_ptr(0), true), layers(out.device_ptr(0), false));
    acc.copy_array(&stream, copy_in).await.unwrap();
    acc.copy_array(&stream, copy_out).await.unwrap();
    drop(layered);
    stream.synchronize().await.unwrap();
    assert!(out.to_vec().await.unwrap() == pattern, "every layer in and out of a 1-D layered array");
}
