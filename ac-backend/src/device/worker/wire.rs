//! What the backend and a session's worker process say to each other over the worker's stdin
//! and its reply pipe (its stdout when it starts; [`super::printed`]): one frame per call or
//! reply.
//!
//! A frame is `id: u32`, `header_len: u32`, `payload_len: u64` (little-endian), then the header
//! ([`Call`] or [`Reply`], through `ac_proto::codec`) and the payload: the raw bytes of a write,
//! a read's result or a module's image, never serialized element by element. Id 0 asks for no
//! reply (releases); every other id gets exactly one. The worker's frames of id 0 are
//! [`Reply::Printed`].

use std::io::{self, Read, Write};

use ac_proto::backend::{
    ArrayCopy, ArraySpec, ContextLimit, DeviceInfo, ErrorKind, JitOption, KernelAttributes, KernelSetting, LaunchDims,
    LinkInput, ModuleSource, Sampler, TensorMapSpec, TextureResource, WireError,
};
use serde::{Deserialize, Serialize};

use crate::device::{DeviceArg, DeviceMem, DeviceModule, DeviceResult, DeviceStream, Kernel, Limited};

/// A header larger than this is not a worker's: the stream is broken.
const MAX_HEADER: usize = ac_proto::codec::MAX_FRAME;

/// One [`crate::device::Context`] call. New calls are appended: during a package upgrade a
/// daemon still running the old binary starts its new sessions' workers from the new one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Call {
    /// `info`.
    Info,
    /// `alloc`.
    Alloc { bytes: u64 },
    /// `free` (no reply).
    Free { mem: DeviceMem },
    /// `write`; the payload is the data.
    Write { dst: DeviceMem, offset: u64, stream: DeviceStream },
    /// `read` of `len` bytes; the reply's payload is the data.
    Read { src: DeviceMem, offset: u64, len: u64, stream: DeviceStream },
    /// `copy`.
    Copy { dst: DeviceMem, dst_offset: u64, src: DeviceMem, src_offset: u64, len: u64, stream: DeviceStream },
    /// `memset`.
    Memset { dst: DeviceMem, offset: u64, len: u64, value: u8, stream: DeviceStream },
    /// `load_module`; the payload is the image.
    LoadModule { source: ModuleSource },
    /// `unload_module` (no reply).
    UnloadModule { module: DeviceModule },
    /// `kernel`.
    Kernel { module: DeviceModule, name: String },
    /// `global`.
    Global { module: DeviceModule, name: String },
    /// `launch_as` a cooperative launch.
    LaunchCooperative { kernel: Kernel, dims: LaunchDims, args: Vec<DeviceArg>, stream: DeviceStream },
    /// `kernel_attributes`.
    KernelAttributes { kernel: Kernel },
    /// `set_kernel_attribute`.
    SetKernelAttribute { kernel: Kernel, setting: KernelSetting },
    /// `set_limit`.
    SetLimit { limit: ContextLimit, value: u64 },
    /// `launch`.
    Launch { kernel: Kernel, dims: LaunchDims, args: Vec<DeviceArg>, stream: DeviceStream },
    /// `create_stream`.
    CreateStream,
    /// `destroy_stream` (no reply).
    DestroyStream { stream: DeviceStream },
    /// `synchronize`.
    Synchronize { stream: DeviceStream },
    /// `upload`: starts bulk copy `transfer` (an id the backend chose) into the device.
    UploadStart { transfer: u32, dst: DeviceMem, offset: u64, len: u64 },
    /// `Upload::push` to `transfer`: the piece is the payload, or in a slot of the shared region.
    UploadPiece { transfer: u32, at: u64, shared: Option<Shared> },
    /// `Upload::finish` of `transfer`.
    UploadFinish { transfer: u32 },
    /// `download`: starts bulk copy `transfer` out of the device.
    DownloadStart { transfer: u32, src: DeviceMem, offset: u64, len: u64 },
    /// `Download::next` of `len` bytes of `transfer`: into slot `slot` of the shared region, or
    /// (`None`) as the reply's payload.
    DownloadNext { transfer: u32, len: u64, slot: Option<u32> },
    /// Drops `transfer`, finished or not (no reply).
    TransferEnd { transfer: u32 },
    /// `launch_as` in clusters of `cluster` blocks.
    LaunchClustered { kernel: Kernel, dims: LaunchDims, args: Vec<DeviceArg>, stream: DeviceStream, cluster: [u32; 3] },
    /// `max_active_clusters`.
    MaxActiveClusters { kernel: Kernel, dims: LaunchDims, cluster: [u32; 3] },
    /// `encode_tensor_map` (the map is the reply's payload).
    EncodeTensorMap { spec: TensorMapSpec<u64> },
    /// `reserve_range`.
    ReserveRange { bytes: u64, alignment: u64 },
    /// `create_physical`.
    CreatePhysical { bytes: u64 },
    /// `release_physical` (no reply).
    ReleasePhysical { handle: u64 },
    /// `map`.
    Map { range: DeviceMem, offset: u64, bytes: u64, handle: u64 },
    /// `unmap`.
    Unmap { range: DeviceMem, offset: u64, bytes: u64 },
    /// `unmap_later` (no reply).
    UnmapLater { range: DeviceMem, offset: u64, bytes: u64 },
    /// `create_array`.
    CreateArray { spec: ArraySpec },
    /// `destroy_array` (no reply).
    DestroyArray { array: u64 },
    /// `copy_array`.
    CopyArray { copy: ArrayCopy<u64, u64>, stream: DeviceStream },
    /// `create_object`.
    CreateObject { resource: TextureResource<u64, u64>, sampler: Option<Sampler> },
    /// `destroy_object` (no reply).
    DestroyObject { object: u64, surface: bool },
    /// `export_allocation` (the driver's handle is the reply's payload).
    ExportAllocation { mem: DeviceMem },
    /// `open_allocation` of `size` bytes (the driver's handle is the payload).
    OpenAllocation { size: u64 },
    /// `close_opened`.
    CloseOpened { mem: DeviceMem },
    /// `export_physical` (the descriptor goes on the worker's socket, before the reply).
    ExportPhysical { handle: u64 },
    /// `import_physical` of `size` bytes (the descriptor came on the socket, before the call).
    ImportPhysical { size: u64 },
    /// `kernel_names`.
    KernelNames { module: DeviceModule },
    /// `link` (the inputs' bytes are the payload, in order).
    Link { inputs: Vec<LinkInput>, options: Vec<JitOption> },
}

/// Where in the shared region ([`super::shared`]) a piece lies: its first `len` bytes of slot
/// `slot`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Shared {
    /// The slot.
    pub slot: u32,
    /// Bytes of it that hold the piece.
    pub len: u32,
}

impl Call {
    /// The bulk copy this call belongs to, for calls after its start: they go to the copy's
    /// own thread, in the order they came.
    pub fn transfer(&self) -> Option<u32> {
        match self {
            Call::UploadPiece { transfer, .. }
            | Call::UploadFinish { transfer }
            | Call::DownloadNext { transfer, .. }
            | Call::TransferEnd { transfer } => Some(*transfer),
            _ => None,
        }
    }
}

/// The answer to a [`Call`], or the worker's first frame.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Reply {
    /// The worker's first frame: its context is open.
    Opened {
        /// The device's `finishes_in_call`.
        finishes_in_call: bool,
    },
    /// The call succeeded and returns nothing (a read's bytes are the payload).
    Done,
    /// `info`'s answer.
    Info(DeviceInfo),
    /// A new handle: memory, module or stream.
    Handle(u64),
    /// `kernel`'s answer.
    Kernel(Kernel),
    /// `global`'s answer.
    Global { mem: DeviceMem, size: u64 },
    /// `kernel_attributes`' answer.
    KernelAttributes(KernelAttributes),
    /// `set_limit`'s answer.
    Limited(Limited),
    /// The call failed (the worker's first frame: the context could not be opened).
    Failed(WireError),
    /// What the session's kernels printed (the payload), sent with id 0 ahead of a reply.
    Printed,
    /// `kernel_names`' answer (appended, as calls are).
    Names(Vec<String>),
    /// `link`'s answer: the linker's log (the image is the payload).
    Linked { info_log: String },
}

/// One frame as read.
#[derive(Debug)]
pub struct Frame<T> {
    /// The call's id (0: no reply wanted).
    pub id: u32,
    /// The call or reply.
    pub header: T,
    /// Raw bytes after it.
    pub payload: Vec<u8>,
}

/// Writes one frame (the caller flushes when a batch ends).
pub fn write_frame<T: Serialize>(out: &mut impl Write, id: u32, header: &T, payload: &[u8]) -> io::Result<()> {
    let mut encoded = Vec::with_capacity(64);
    ac_proto::codec::encode_into(header, &mut encoded).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let mut prefix = [0u8; 16];
    prefix[..4].copy_from_slice(&id.to_le_bytes());
    prefix[4..8].copy_from_slice(&(encoded.len() as u32).to_le_bytes());
    prefix[8..].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    out.write_all(&prefix)?;
    out.write_all(&encoded)?;
    out.write_all(payload)
}

/// Reads one frame; `Ok(None)` at a clean end of the stream.
pub fn read_frame<T: serde::de::DeserializeOwned>(input: &mut impl Read) -> io::Result<Option<Frame<T>>> {
    let mut prefix = [0u8; 16];
    match input.read_exact(&mut prefix) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let id = u32::from_le_bytes(prefix[..4].try_into().expect("4 bytes"));
    let header_len = u32::from_le_bytes(prefix[4..8].try_into().expect("4 bytes")) as usize;
    let payload_len = u64::from_le_bytes(prefix[8..].try_into().expect("8 bytes"));
    if header_len > MAX_HEADER {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a header of {header_len} bytes")));
    }
    let mut header = vec![0u8; header_len];
    input.read_exact(&mut header)?;
    let header = ac_proto::codec::decode(&header).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let payload_len = usize::try_from(payload_len).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    // Read into spare capacity: no zeroing of a piece's megabyte first.
    let mut payload = Vec::with_capacity(payload_len);
    input.take(payload_len as u64).read_to_end(&mut payload)?;
    if payload.len() != payload_len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(Some(Frame { id, header, payload }))
}

/// The error every call gets once the worker is gone.
pub fn worker_gone(why: &str) -> WireError {
    WireError::new(
        ErrorKind::ContextLost,
        format!("the session's worker process ended ({why}); its device state is lost, open a new session"),
    )
}

/// Refuses a reply other than [`Reply::Done`].
pub fn expect_done(reply: Reply) -> DeviceResult<()> {
    match reply {
        Reply::Done => Ok(()),
        other => Err(unexpected(other)),
    }
}

/// Copies what the worker read into `out`, which it must fill exactly.
pub fn fill(out: &mut [u8], read: &[u8]) -> DeviceResult<()> {
    if read.len() != out.len() {
        return Err(WireError::new(ErrorKind::Internal, "the session worker read the wrong length"));
    }
    out.copy_from_slice(read);
    Ok(())
}

/// The error for a reply the call does not expect.
pub fn unexpected(reply: Reply) -> WireError {
    WireError::new(ErrorKind::Internal, format!("the session worker answered {reply:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_with_its_payload_and_a_clean_end_reads_as_none() {
        let mut bytes = Vec::new();
        let call = Call::Write { dst: DeviceMem(7), offset: 3, stream: DeviceStream(2) };
        write_frame(&mut bytes, 9, &call, b"payload").unwrap();
        write_frame(&mut bytes, 0, &Call::Free { mem: DeviceMem(7) }, &[]).unwrap();
        let mut input = &bytes[..];
        let frame: Frame<Call> = read_frame(&mut input).unwrap().unwrap();
        assert_eq!((frame.id, frame.payload.as_slice()), (9, &b"payload"[..]));
        assert!(matches!(frame.header, Call::Write { dst: DeviceMem(7), offset: 3, stream: DeviceStream(2) }));
        let frame: Frame<Call> = read_frame(&mut input).unwrap().unwrap();
        assert!(matches!(frame.header, Call::Free { mem: DeviceMem(7) }));
        assert!(read_frame::<Call>(&mut input).unwrap().is_none());
    }

    /// The variant's number its encoding opens with.
    fn number<T: Serialize>(value: &T) -> u8 {
        let mut bytes = Vec::new();
        ac_proto::codec::encode_into(value, &mut bytes).unwrap();
        bytes[0]
    }

    /// A daemon still running the old binary reads the frames of workers started from the new
    /// one (a package upgrade) by their variants' numbers: calls and replies are appended, never
    /// inserted, so the older ones keep theirs.
    #[test]
    fn calls_and_replies_keep_their_numbers() {
        let kernel = Kernel { handle: 0, name: String::new(), params: None, sizes: None };
        let dims = LaunchDims { grid: [1; 3], block: [1; 3], shared_mem: 0 };
        let launch = Call::Launch { kernel, dims, args: Vec::new(), stream: DeviceStream(0) };
        assert_eq!(number(&launch), 15);
        assert_eq!(number(&Call::ImportPhysical { size: 0 }), 43);
        assert_eq!(number(&Call::KernelNames { module: DeviceModule(0) }), 44);
        assert_eq!(number(&Reply::Failed(WireError::new(ac_proto::backend::ErrorKind::Device, "x"))), 8);
        assert_eq!(number(&Reply::Printed), 9);
        assert_eq!(number(&Reply::Names(Vec::new())), 10);
        assert_eq!(number(&Call::Link { inputs: Vec::new(), options: Vec::new() }), 45);
        assert_eq!(number(&Reply::Linked { info_log: String::new() }), 11);
    }

    #[test]
    fn a_cut_or_oversized_frame_is_an_error() {
        let mut bytes = Vec::new();
        write_frame(&mut bytes, 1, &Call::Info, b"abc").unwrap();
        let cut = &bytes[..bytes.len() - 1];
        assert!(read_frame::<Call>(&mut &cut[..]).is_err());
        let mut huge = bytes.clone();
        huge[4..8].copy_from_slice(&(MAX_HEADER as u32 + 1).to_le_bytes());
        assert!(read_frame::<Call>(&mut &huge[..]).is_err());
    }
}
