//! Streams and events. A stream is a stream of the device's session; the null stream and the
//! legacy and per-thread default streams are the session's default stream. Events are kept
//! locally: recording one notes its stream, and waiting for it waits for that stream (a
//! stream that waits for an event waits on the host, which orders it correctly). Their times
//! are the host's: recorded when the record was queued, ended when the wait returned. Host
//! functions and callbacks run on the calling thread once their stream is done.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

pub mod attributes;

use crate::context::current_device;
use crate::error::{code, CuResult, Error};
use crate::graph::{self, Kept, Mark, NodeKind};
use crate::guard;
use crate::managed;
use crate::pool;
use crate::state::{self, put, Registry};

/// A stream the program created.
#[derive(Debug)]
pub struct StreamRecord {
    /// Its device's ordinal.
    pub device: usize,
    /// The session's stream.
    pub stream: ac_frontend::Stream,
    /// The context the program created (`cuCtxCreate`) that was current when it was made;
    /// `None`: the device's primary context.
    pub context: Option<usize>,
    /// Its attributes (`cuStreamSetAttribute`), kept by [`attributes`].
    pub attributes: Mutex<attributes::Attributes>,
}

/// An event the program created.
#[derive(Debug, Default)]
pub struct EventRecord {
    /// Where it was last recorded: the device and the stream handle (0 for the default).
    marked: Mutex<Option<(usize, usize, Instant)>>,
    /// When a wait for it last returned.
    reached: Mutex<Option<Instant>>,
    /// Where it was last recorded if that was in a stream capture: waiting for it joins the
    /// capture.
    captured: Mutex<Option<Mark>>,
    /// Made with `CU_EVENT_INTERPROCESS`, or opened from another process's handle: a record of
    /// it waits for the work before it (see `crate::ipc`).
    pub(crate) interprocess: bool,
}

pub(crate) fn streams() -> &'static Registry<StreamRecord> {
    static STREAMS: OnceLock<Registry<StreamRecord>> = OnceLock::new();
    STREAMS.get_or_init(Registry::default)
}

fn events() -> &'static Registry<EventRecord> {
    static EVENTS: OnceLock<Registry<EventRecord>> = OnceLock::new();
    EVENTS.get_or_init(Registry::default)
}

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`: both the default stream here.
const DEFAULT_STREAMS: [usize; 3] = [0, 1, 2];

/// The session stream a handle names on `device`, to send work to or wait for: a capturing
/// stream's work is recorded instead ([`graph::or_record`]), so this refuses one (and
/// invalidates its capture).
pub fn stream_of(handle: usize, device: usize) -> CuResult<ac_frontend::Stream> {
    graph::refuse_if_capturing(handle, "work that is not recorded, or a wait,")?;
    session_stream(handle, device)
}

/// The session stream a handle names on `device`, capturing or not: for queries, and for
/// waiting for work recorded before a capture began.
fn session_stream(handle: usize, device: usize) -> CuResult<ac_frontend::Stream> {
    let shim = state::shim()?;
    if DEFAULT_STREAMS.contains(&handle) {
        return Ok(shim.devices.get(device).ok_or(Error::Code(code::INVALID_DEVICE))?.acc.default_stream());
    }
    let record = streams().get(handle)?;
    if record.device != device {
        return Err(Error::said(code::INVALID_HANDLE, "a stream of another device"));
    }
    Ok(record.stream.clone())
}

/// Whether `handle` names a default stream (the NULL stream, `CU_STREAM_LEGACY` or
/// `CU_STREAM_PER_THREAD`), not one the program created.
pub fn is_default_stream(handle: usize) -> bool {
    DEFAULT_STREAMS.contains(&handle)
}

/// The key of the order a stream handle's work is in: the default streams are one stream.
pub fn order_key(handle: usize) -> usize {
    if DEFAULT_STREAMS.contains(&handle) {
        0
    } else {
        handle
    }
}

/// The order a free on stream `handle` is in: the legacy default stream's waits, in CUDA, for
/// every blocking stream, which the default stream here does not ([`pool::LEGACY_ORDER`]).
pub fn free_order(handle: usize) -> usize {
    match handle {
        0 | 1 => pool::LEGACY_ORDER,
        _ => order_key(handle),
    }
}

/// The device a stream handle belongs to (the current device for the default streams).
pub fn device_of_stream(handle: usize) -> CuResult<usize> {
    if DEFAULT_STREAMS.contains(&handle) {
        return current_device();
    }
    Ok(streams().get(handle)?.device)
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(out: *mut usize, _flags: c_uint) -> u32 {
    guard("cuStreamCreate", || create(out))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(out: *mut usize, _flags: c_uint, _priority: c_int) -> u32 {
    guard("cuStreamCreateWithPriority", || create(out))
}

unsafe fn create(out: *mut usize) -> CuResult<()> {
    if out.is_null() {
        return Err(Error::Code(code::INVALID_VALUE));
    }
    let shim = state::shim()?;
    let device = current_device()?;
    let stream = shim.block_on(shim.devices[device].acc.create_stream())?;
    let context = crate::context::created_current();
    put(out, streams().insert(StreamRecord { device, stream, context, attributes: Mutex::default() }))
}

#[no_mangle]
pub extern "C" fn cuStreamDestroy_v2(handle: usize) -> u32 {
    guard("cuStreamDestroy", || {
        let record = streams().remove(handle)?;
        managed::stream_destroyed(record.device, handle);
        graph::stream_destroyed(handle);
        let shim = state::shim()?;
        let before = pool::mark();
        shim.block_on(record.stream.clone().destroy())?;
        // Its work is done: what was freed in its order may go to any stream (a later stream
        // may get the same handle once `record` is gone).
        pool::settled(record.device, Some(handle), before);
        Ok(())
    })
}

/// Waits for the work queued on stream `handle` before now, capturing or not (what a capture
/// recorded is not queued), and nothing more: no memory changes hands.
pub(crate) fn wait_for_work(handle: usize) -> CuResult<()> {
    let shim = state::shim()?;
    let stream = session_stream(handle, device_of_stream(handle)?)?;
    Ok(shim.block_on(stream.synchronize())?)
}

/// Waits for everything queued on `handle`; then managed memory is the host's again.
fn synchronize(handle: usize) -> CuResult<()> {
    let shim = state::shim()?;
    let device = device_of_stream(handle)?;
    let stream = stream_of(handle, device)?;
    let before = pool::mark();
    shim.block_on(stream.synchronize())?;
    pool::settled(device, Some(order_key(handle)), before);
    managed::settle(device, Some((handle, &stream)))
}

#[no_mangle]
pub extern "C" fn cuStreamSynchronize(handle: usize) -> u32 {
    guard("cuStreamSynchronize", || synchronize(handle))
}

/// `CUhostFn`: a host function queued on a stream.
pub(crate) type HostFn = unsafe extern "C" fn(*mut c_void);
/// `CUstreamCallback`: a callback queued on a stream, told the stream's status.
type StreamCallback = unsafe extern "C" fn(usize, u32, *mut c_void);

// Host functions and callbacks run when their stream reaches them: here the call waits for the
// stream and runs the function in place, on the calling thread, so the stream's later work is
// sent after it returns (CUDA runs them on a thread of its own; they may not call CUDA either
// way).

/// Runs `function(data)` once stream `handle`'s work before it is done; not in the event of an
/// error in that work, which is the call's.
pub(crate) unsafe fn run_host_function(handle: usize, function: Option<HostFn>, data: *mut c_void) -> CuResult<()> {
    let function = function.ok_or_else(|| Error::said(code::INVALID_VALUE, "the host function is null"))?;
    let data = Kept::new(data);
    graph::or_record(handle, NodeKind::Host, move |stream| {
        synchronize(stream)?;
        // SAFETY: the program's function and argument, called as it asked.
        unsafe { function(data.get()) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc(handle: usize, function: Option<HostFn>, data: *mut c_void) -> u32 {
    guard("cuLaunchHostFunc", || run_host_function(handle, function, data))
}

/// CUDA 13.1's form: a synchronization mode for the thread that runs the function, which has
/// none here (it runs on the calling thread).
#[no_mangle]
pub unsafe extern "C" fn cuLaunchHostFunc_v2(
    handle: usize,
    function: Option<HostFn>,
    data: *mut c_void,
    _sync_mode: c_uint,
) -> u32 {
    guard("cuLaunchHostFunc", || run_host_function(handle, function, data))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamAddCallback(
    handle: usize,
    callback: Option<StreamCallback>,
    data: *mut c_void,
    flags: c_uint,
) -> u32 {
    guard("cuStreamAddCallback", || {
        let callback = callback.ok_or_else(|| Error::said(code::INVALID_VALUE, "the callback is null"))?;
        if flags != 0 {
            return Err(Error::said(code::INVALID_VALUE, format!("callback flags {flags:#x} (must be 0)")));
        }
        // A stream that is not the program's is the call's error; the stream's own error, if
        // any, is the callback's status, and it runs either way.
        let device = device_of_stream(handle)?;
        let stream = stream_of(handle, device)?;
        let shim = state::shim()?;
        // Done, the stream's managed memory is the host's: the callback may read it.
        let done = shim
            .block_on(stream.synchronize())
            .map_err(Error::from)
            .and_then(|()| managed::settle(device, Some((handle, &stream))));
        let status = done.err().map_or(code::SUCCESS, |e| e.code());
        callback(handle, status, data);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuStreamQuery(handle: usize) -> u32 {
    // Answered by waiting: "done" is then always true, and never early.
    guard("cuStreamQuery", || synchronize(handle))
}

/// `CU_EVENT_RECORD_EXTERNAL` and `CU_EVENT_WAIT_EXTERNAL`: in a capture, an event record or
/// wait node of the graph rather than a dependency within it.
const EXTERNAL: c_uint = 1;

#[no_mangle]
pub extern "C" fn cuStreamWaitEvent(handle: usize, event: usize, flags: c_uint) -> u32 {
    guard("cuStreamWaitEvent", || {
        device_of_stream(handle)?;
        if flags & EXTERNAL != 0 && graph::is_capturing(handle) {
            events().get(event)?;
            return graph::or_record_with(
                handle,
                NodeKind::EventWait,
                move || event_of(event),
                move |_| wait_for(event),
            );
        }
        // An event recorded in a capture: this stream joins it. Otherwise the host waits now,
        // which orders a capturing stream's recorded work after it too.
        let mark = events().get(event)?.captured.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match mark {
            Some(mark) => graph::join(handle, &mark),
            None => wait_for(event),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetFlags(handle: usize, flags: *mut c_uint) -> u32 {
    guard("cuStreamGetFlags", || {
        device_of_stream(handle)?;
        put(flags, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetPriority(handle: usize, priority: *mut c_int) -> u32 {
    guard("cuStreamGetPriority", || {
        device_of_stream(handle)?;
        put(priority, 0)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx(handle: usize, context: *mut usize) -> u32 {
    guard("cuStreamGetCtx", || put(context, context_of_stream(handle)?))
}

/// CUDA 12.5: the stream's context, and its green context (none: green contexts are not
/// served).
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx_v2(handle: usize, context: *mut usize, green: *mut usize) -> u32 {
    guard("cuStreamGetCtx_v2", || {
        put(context, context_of_stream(handle)?)?;
        put(green, 0)
    })
}

/// The context of stream `handle`: a default stream's is the current context, another's the
/// context it was made in.
fn context_of_stream(handle: usize) -> CuResult<usize> {
    let device = device_of_stream(handle)?;
    let created =
        if is_default_stream(handle) { crate::context::created_current() } else { streams().get(handle)?.context };
    let primary = crate::context::handle_of(&state::shim()?.devices[device].context);
    Ok(created.unwrap_or(primary))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetDevice(handle: usize, device: *mut c_int) -> u32 {
    guard("cuStreamGetDevice", || put(device, device_of_stream(handle)? as c_int))
}

#[no_mangle]
pub unsafe extern "C" fn cuStreamGetId(handle: usize, id: *mut u64) -> u32 {
    guard("cuStreamGetId", || {
        let device = device_of_stream(handle)?;
        put(id, session_stream(handle, device)?.id().0)
    })
}

// ---- Events ----

/// The stream an event recorded on a whole context stands on (`cuCtxRecordEvent`): every
/// stream of its device. No stream handle is this address.
const WHOLE_DEVICE: usize = usize::MAX;

/// `CU_EVENT_DISABLE_TIMING`.
const DISABLE_TIMING: c_uint = 2;
/// `CU_EVENT_INTERPROCESS`: the event may be shared with another process
/// (`cuIpcGetEventHandle`), and must not time (CUDA refuses it with timing).
const INTERPROCESS: c_uint = 4;

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(out: *mut usize, flags: c_uint) -> u32 {
    guard("cuEventCreate", || {
        state::shim()?;
        let interprocess = flags & INTERPROCESS != 0;
        if interprocess && flags & DISABLE_TIMING == 0 {
            return Err(Error::said(code::INVALID_VALUE, "an interprocess event must disable timing"));
        }
        put(out, insert_event(interprocess))
    })
}

/// A new event of the program's: its handle.
pub(crate) fn insert_event(interprocess: bool) -> usize {
    events().insert(EventRecord { interprocess, ..EventRecord::default() })
}

/// Whether `event` may be shared with another process (`CU_EVENT_INTERPROCESS`).
pub(crate) fn is_interprocess(event: usize) -> CuResult<bool> {
    Ok(events().get(event)?.interprocess)
}

#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(event: usize) -> u32 {
    guard("cuEventDestroy", || events().remove(event).map(drop))
}

// CUDA 2.0's names, of the same signatures (`cuda.h` maps them to the `_v2` forms since 4.0).
crate::per_thread_aliases! {
    cuStreamDestroy => cuStreamDestroy_v2,
    cuEventDestroy => cuEventDestroy_v2,
}

#[no_mangle]
pub extern "C" fn cuEventRecord(event: usize, stream: usize) -> u32 {
    guard("cuEventRecord", || record(event, stream))
}

#[no_mangle]
pub extern "C" fn cuEventRecordWithFlags(event: usize, stream: usize, flags: c_uint) -> u32 {
    guard("cuEventRecordWithFlags", || {
        if flags & EXTERNAL != 0 && graph::is_capturing(stream) {
            events().get(event)?;
            let record = move |stream| record(event, stream);
            return graph::or_record_with(stream, NodeKind::EventRecord, move || event_of(event), record);
        }
        record(event, stream)
    })
}

/// What a captured event node keeps of its event (`cuGraphEvent*NodeGetEvent` reads it).
fn event_of(event: usize) -> Option<graph::Params> {
    Some(Arc::new(graph::EventOf(event)))
}

/// `CUDA_ERROR_INVALID_HANDLE` unless `event` is an event of the program's.
pub(crate) fn check_event(event: usize) -> CuResult<()> {
    events().get(event).map(drop)
}

/// Records `event` on `stream` (or, if the stream is capturing, marks where it stands in the
/// capture).
pub(crate) fn record(event: usize, stream: usize) -> CuResult<()> {
    let record = events().get(event)?;
    let device = device_of_stream(stream)?;
    let mark = graph::mark(stream);
    let captured = mark.is_some();
    *record.captured.lock().unwrap_or_else(|p| p.into_inner()) = mark;
    if captured {
        return Ok(());
    }
    mark_recorded(event, &record, device, stream)
}

/// `event` (its `record`) now stands for the work queued so far on `stream` of `device`
/// ([`WHOLE_DEVICE`]: on every stream of it).
fn mark_recorded(event: usize, record: &EventRecord, device: usize, stream: usize) -> CuResult<()> {
    *record.marked.lock().unwrap_or_else(|p| p.into_inner()) = Some((device, stream, Instant::now()));
    *record.reached.lock().unwrap_or_else(|p| p.into_inner()) = None;
    if record.interprocess {
        // Another process learns of the record only after it returns: then the work before it
        // is done, and its wait has nothing left to wait for.
        return wait_for(event);
    }
    Ok(())
}

/// Waits until the work before the event's last record is done (at once if never recorded);
/// an event recorded in a capture stands for work that has not run: `CUDA_ERROR_CAPTURED_EVENT`.
pub(crate) fn wait_for(event: usize) -> CuResult<()> {
    let record = events().get(event)?;
    if record.captured.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
        return Err(Error::said(graph::result::CAPTURED_EVENT, "the event was recorded in a stream capture"));
    }
    let marked = *record.marked.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((device, WHOLE_DEVICE, _)) = marked {
        crate::context::synchronize(device)?;
    } else if let Some((device, stream, _)) = marked {
        let shim = state::shim()?;
        // A stream destroyed since: its work was waited for when it was destroyed.
        if let Ok(session) = session_stream(stream, device) {
            let before = pool::mark();
            shim.block_on(session.synchronize())?;
            pool::settled(device, Some(order_key(stream)), before);
        }
        managed::settle(device, None)?;
    }
    let mut reached = record.reached.lock().unwrap_or_else(|p| p.into_inner());
    reached.get_or_insert_with(Instant::now);
    Ok(())
}

/// CUDA 12.5: `event` stands for the work queued so far in context `context`, as a record on
/// each of its streams would. A device's contexts share its session here, so it waits for the
/// work of the device's other contexts as well. A capture in progress is not refused.
#[no_mangle]
pub extern "C" fn cuCtxRecordEvent(context: usize, event: usize) -> u32 {
    guard("cuCtxRecordEvent", || {
        let device = crate::context::context_of(context)?.device;
        let record = events().get(event)?;
        *record.captured.lock().unwrap_or_else(|p| p.into_inner()) = None;
        mark_recorded(event, &record, device, WHOLE_DEVICE)
    })
}

/// CUDA 12.5: later work in context `context` waits for `event`. As `cuStreamWaitEvent`, the
/// host waits, which orders that work after it.
#[no_mangle]
pub extern "C" fn cuCtxWaitEvent(context: usize, event: usize) -> u32 {
    guard("cuCtxWaitEvent", || {
        crate::context::context_of(context)?;
        wait_for(event)
    })
}

#[no_mangle]
pub extern "C" fn cuEventSynchronize(event: usize) -> u32 {
    guard("cuEventSynchronize", || wait_for(event))
}

#[no_mangle]
pub extern "C" fn cuEventQuery(event: usize) -> u32 {
    guard("cuEventQuery", || wait_for(event))
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut f32, start: usize, end: usize) -> u32 {
    guard("cuEventElapsedTime", || {
        wait_for(end)?;
        let (start, end) = (events().get(start)?, events().get(end)?);
        let began = start.marked.lock().unwrap_or_else(|p| p.into_inner()).map(|m| m.2);
        let ended = *end.reached.lock().unwrap_or_else(|p| p.into_inner());
        let (Some(began), Some(ended)) = (began, ended) else {
            return Err(Error::Code(code::INVALID_HANDLE));
        };
        put(ms, ended.saturating_duration_since(began).as_secs_f32() * 1e3)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(ms: *mut f32, start: usize, end: usize) -> u32 {
    cuEventElapsedTime(ms, start, end)
}
