//! Streams and events: work queued in order, and the calls that wait for it.
// As in lib.rs: C functions taking raw pointers from their caller, as the driver does.
#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::c_uint;

use crate::state::{Event, Guard, Op, Stream};
use crate::{code, driver, handle, id, owned, run, with_context, Handle, CURRENT};

#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut Handle, _flags: c_uint) -> u32 {
    with_context("cuStreamCreate", |d, context| {
        let id = d.handle();
        d.streams.insert(id, Stream::new(context));
        *stream = handle(id);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuStreamDestroy_v2(stream: Handle) -> u32 {
    with_context("cuStreamDestroy", |d, context| {
        let owner = d.streams.get(&id(stream)).map(|s| s.context);
        owned(d, "stream", owner, context)?;
        // Documented: work still queued completes, then the stream's resources go.
        run::run(d, id(stream), u64::MAX);
        d.streams.remove(&id(stream));
        Ok(())
    })
}

/// Waits for work: runs it, writes out what its kernels printed (as the driver writes its
/// printf buffer at a synchronization), then reports a fault it caused (sticky for the context).
fn wait(call: &str, body: impl FnOnce(&mut Guard<'static>, u64) -> Result<(), u32>) -> u32 {
    let mut d = driver();
    let context = CURRENT.with(Cell::get);
    if context == 0 {
        d.violation(format!("{call} without a current context on this thread"));
        return code::INVALID_CONTEXT;
    }
    let outcome = match d.contexts.get(&context) {
        None => Err(code::CONTEXT_IS_DESTROYED),
        Some(_) => body(&mut d, context).and_then(|()| {
            d.write_out_printed(context);
            d.usable(context).map(|_| ())
        }),
    };
    outcome.err().unwrap_or(code::SUCCESS)
}

#[no_mangle]
pub extern "C" fn cuStreamSynchronize(stream: Handle) -> u32 {
    wait("cuStreamSynchronize", |d, context| {
        let stream = d.stream(context, id(stream))?;
        run::run(d, stream, u64::MAX);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> u32 {
    wait("cuCtxSynchronize", |d, context| {
        run::finish_context(d, context);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(event: *mut Handle, _flags: c_uint) -> u32 {
    with_context("cuEventCreate", |d, context| {
        let id = d.handle();
        d.events.insert(id, Event { context, recorded: None });
        *event = handle(id);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuEventRecord(event: Handle, stream: Handle) -> u32 {
    with_context("cuEventRecord", |d, context| {
        let owner = d.events.get(&id(event)).map(|e| e.context);
        owned(d, "event", owner, context)?;
        let stream = d.stream(context, id(stream))?;
        let seq = d.queue(stream, Op::Record);
        d.events.get_mut(&id(event)).expect("checked").recorded = Some((stream, seq));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuEventSynchronize(event: Handle) -> u32 {
    wait("cuEventSynchronize", |d, context| {
        let owner = d.events.get(&id(event)).map(|e| e.context);
        owned(d, "event", owner, context)?;
        if let Some((stream, seq)) = d.events[&id(event)].recorded {
            run::run(d, stream, seq);
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(event: Handle) -> u32 {
    with_context("cuEventDestroy", |d, context| {
        let owner = d.events.get(&id(event)).map(|e| e.context);
        owned(d, "event", owner, context)?;
        d.events.remove(&id(event));
        Ok(())
    })
}
