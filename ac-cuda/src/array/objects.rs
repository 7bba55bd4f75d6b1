//! Texture and surface objects (`cuTexObjectCreate`, `cuSurfObjectCreate`, their destruction
//! and descriptors; the runtime's `cudaCreateTextureObject`, `cudaCreateSurfaceObject`): backend
//! protocol 16. An object is made on the backend over one of the program's arrays or a range
//! of its device memory; its value is the remote driver's, which the program's kernels take as
//! a parameter and hand to the remote GPU unchanged. Kept here by (device, value, kind): two remote
//! GPUs may hand out the same value, and one GPU a texture's and a surface's.
//!
//! Not served: mipmapped arrays (`cuMipmappedArrayCreate`), resource views, and the texture
//! and surface references of old programs (`cuTexRef*`, removed in CUDA 12).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use ac_frontend::{DeviceObject, Sampler, TextureResource};

use super::array_record;
use crate::context::current_device;
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::memory::locate;
use crate::state::{self, put};

/// `CUDA_RESOURCE_DESC`: the union as 16 8-byte words.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ResourceDesc {
    kind: u32,
    res: [u64; 16],
    flags: u32,
}

/// `CUDA_TEXTURE_DESC`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TextureDesc {
    address_modes: [u32; 3],
    filter_mode: u32,
    flags: u32,
    max_anisotropy: u32,
    mipmap_filter_mode: u32,
    mipmap_level_bias: f32,
    min_mipmap_level_clamp: f32,
    max_mipmap_level_clamp: f32,
    border_color: [f32; 4],
    reserved: [i32; 12],
}

/// `CUresourcetype`.
const ARRAY: u32 = 0;
const MIPMAPPED_ARRAY: u32 = 1;
const LINEAR: u32 = 2;
const PITCH_2D: u32 = 3;

/// A texture or surface object of the program.
struct ObjectRecord {
    /// The session's object: dropping it destroys the remote one.
    _object: DeviceObject,
    resource: ResourceDesc,
    /// `None`: a surface object.
    texture: Option<TextureDesc>,
}

/// Objects by (device, value, whether a texture): a texture and a surface may share a value.
type Key = (usize, u64, bool);
type Objects = HashMap<Key, ObjectRecord>;

static OBJECTS: LazyLock<Mutex<Objects>> = LazyLock::new(Mutex::default);

fn objects() -> std::sync::MutexGuard<'static, Objects> {
    OBJECTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The key of object `value`, a texture if `texture`: the current device's first.
fn key_of(objects: &Objects, value: u64, texture: bool) -> CuResult<Key> {
    let current = current_device().ok().map(|device| (device, value, texture));
    let found = current
        .filter(|key| objects.contains_key(key))
        .or_else(|| objects.keys().find(|&&(_, v, t)| v == value && t == texture).copied());
    let what = if texture { "texture" } else { "surface" };
    found.ok_or_else(|| Error::said(code::INVALID_VALUE, format!("{value:#x} is no {what} object of this program")))
}

/// `read` of object `value`'s record (a texture if `texture`), under the table's lock.
fn with_record<T>(value: u64, texture: bool, read: impl FnOnce(&ObjectRecord) -> T) -> CuResult<T> {
    let objects = objects();
    let key = key_of(&objects, value, texture)?;
    Ok(read(&objects[&key]))
}

/// The device and the session's resource that `desc` names.
fn resource(desc: &ResourceDesc) -> CuResult<(usize, TextureResource)> {
    let (format, channels) = (desc.res[1] as u32, (desc.res[1] >> 32) as u32);
    let linear = |resource: TextureResource<(), u64>| -> CuResult<(usize, TextureResource)> {
        let Some((address, Some(span))) = resource.linear_span() else {
            return Err(Error::said(code::INVALID_VALUE, format!("a texture over {resource:?} spans no memory")));
        };
        let (alloc, offset) = locate(address, span)?;
        Ok((alloc.device, resource.over(|()| unreachable!("linear"), |_| alloc.buffer.device_ptr(offset))))
    };
    match desc.kind {
        ARRAY => {
            let a = array_record(desc.res[0] as usize)?;
            Ok((a.device, TextureResource::Array(a.array.id())))
        }
        MIPMAPPED_ARRAY => {
            Err(Error::said(code::NOT_SUPPORTED, "mipmapped arrays are not served on remote accelerators"))
        }
        LINEAR => linear(TextureResource::Linear { address: desc.res[0], format, channels, bytes: desc.res[2] }),
        PITCH_2D => {
            let [address, _, width, height, pitch] = [0, 1, 2, 3, 4].map(|i| desc.res[i]);
            linear(TextureResource::Pitch2D { address, format, channels, width, height, pitch })
        }
        other => Err(Error::said(code::INVALID_VALUE, format!("resource type {other} is none of CUDA's"))),
    }
}

/// Makes an object over `desc` (a texture object with `texture`) and answers its value.
fn create(out: *mut u64, desc: *const ResourceDesc, texture: Option<TextureDesc>) -> CuResult<()> {
    // SAFETY: null or a CUDA_RESOURCE_DESC of the program's.
    let resource_desc = *unsafe { desc.as_ref() }.ok_or(Error::Code(code::INVALID_VALUE))?;
    if out.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let (device, resource) = resource(&resource_desc)?;
    let shim = state::shim()?;
    let acc = &shim.devices.get(device).ok_or(Error::Code(code::INVALID_DEVICE))?.acc;
    let object = match (&texture, resource) {
        (Some(t), resource) => shim.block_on(acc.create_texture(resource, sampler(t)))?,
        (None, TextureResource::Array(_)) => {
            let a = array_record(resource_desc.res[0] as usize)?;
            shim.block_on(acc.create_surface(&a.array))?
        }
        (None, _) => return Err(Error::said(code::INVALID_VALUE, "a surface object reads a CUDA array only")),
    };
    let value = object.value();
    let record = ObjectRecord { _object: object, resource: resource_desc, texture };
    objects().insert((device, value, texture.is_some()), record);
    // SAFETY: checked non-null above.
    unsafe { put(out, value) }
}

/// How `t` says a texture reads.
fn sampler(t: &TextureDesc) -> Sampler {
    Sampler {
        address_modes: t.address_modes,
        filter_mode: t.filter_mode,
        flags: t.flags,
        max_anisotropy: t.max_anisotropy,
        mipmap_filter_mode: t.mipmap_filter_mode,
        mipmap_level_bias: t.mipmap_level_bias,
        min_mipmap_level_clamp: t.min_mipmap_level_clamp,
        max_mipmap_level_clamp: t.max_mipmap_level_clamp,
        border_color: t.border_color,
    }
}

/// Forgets object `value` (a texture if `texture`): the remote one is destroyed after the work
/// queued before.
fn destroy(value: u64, texture: bool) -> CuResult<()> {
    let gone = {
        let mut objects = objects();
        let key = key_of(&objects, value, texture)?;
        objects.remove(&key)
    };
    drop(gone); // outside the lock: its destruction is posted to the backend
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn cuTexObjectCreate(
    out: *mut u64,
    resource: *const ResourceDesc,
    texture: *const TextureDesc,
    view: *const std::ffi::c_void,
) -> u32 {
    guard("cuTexObjectCreate", || {
        if !view.is_null() {
            return Err(Error::said(code::NOT_SUPPORTED, "resource views are not served on remote accelerators"));
        }
        let texture = *texture.as_ref().ok_or(Error::Code(code::INVALID_VALUE))?;
        create(out, resource, Some(texture))
    })
}

#[no_mangle]
pub extern "C" fn cuTexObjectDestroy(value: u64) -> u32 {
    guard("cuTexObjectDestroy", || destroy(value, true))
}

#[no_mangle]
pub unsafe extern "C" fn cuTexObjectGetResourceDesc(out: *mut ResourceDesc, value: u64) -> u32 {
    guard("cuTexObjectGetResourceDesc", || put(out, with_record(value, true, |r| r.resource)?))
}

#[no_mangle]
pub unsafe extern "C" fn cuTexObjectGetTextureDesc(out: *mut TextureDesc, value: u64) -> u32 {
    guard("cuTexObjectGetTextureDesc", || put(out, with_record(value, true, |r| r.texture.expect("a texture's key"))?))
}

#[no_mangle]
pub unsafe extern "C" fn cuSurfObjectCreate(out: *mut u64, resource: *const ResourceDesc) -> u32 {
    guard("cuSurfObjectCreate", || create(out, resource, None))
}

#[no_mangle]
pub extern "C" fn cuSurfObjectDestroy(value: u64) -> u32 {
    guard("cuSurfObjectDestroy", || destroy(value, false))
}

#[no_mangle]
pub unsafe extern "C" fn cuSurfObjectGetResourceDesc(out: *mut ResourceDesc, value: u64) -> u32 {
    guard("cuSurfObjectGetResourceDesc", || put(out, with_record(value, false, |r| r.resource)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_are_laid_out_as_cuda_h_lays_them_out() {
        assert_eq!(std::mem::size_of::<ResourceDesc>(), 144);
        assert_eq!(std::mem::offset_of!(ResourceDesc, flags), 136);
        assert_eq!(std::mem::size_of::<TextureDesc>(), 104);
        assert_eq!(std::mem::offset_of!(TextureDesc, border_color), 40);
        assert_eq!(std::mem::size_of::<super::super::Array3DDescriptor>(), 40);
        assert_eq!(std::mem::size_of::<super::super::ArrayDescriptor>(), 24);
    }
}
