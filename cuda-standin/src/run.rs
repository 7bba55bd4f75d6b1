//! Running queued work: a stream's operations in order, when someone waits for them.

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::state::{Driver, Guard, Op, Result};
use crate::{code, fixtures, host, kernels};

/// Signalled whenever a stream's kernel ends. One for every driver: the stand-in has one, and
/// the unit tests' own drivers, but for the test below, run on one thread and never wait on it.
static KERNEL_ENDED: Condvar = Condvar::new();

/// Waits for the context's work, then destroys it and every handle of it.
pub fn destroy_context(d: &mut Guard, id: u64) -> Result<()> {
    if !d.contexts.contains_key(&id) {
        return Err(code::INVALID_CONTEXT);
    }
    let streams: Vec<u64> = d.streams.iter().filter(|(_, s)| s.context == id).map(|(k, _)| *k).collect();
    for stream in streams {
        run(d, stream, u64::MAX);
    }
    d.write_out_printed(id);
    d.contexts.remove(&id);
    d.forget_ranges(id);
    d.memory.retain(|_, a| a.context != id);
    d.streams.retain(|_, s| s.context != id);
    d.events.retain(|_, e| e.context != id);
    d.modules.retain(|_, m| m.context != id);
    d.functions.retain(|_, f| f.context != id);
    Ok(())
}

/// Runs all of `context`'s queued work, on every stream of it.
pub fn finish_context(d: &mut Guard, context: u64) {
    let streams: Vec<u64> = d.streams.iter().filter(|(_, s)| s.context == context).map(|(&k, _)| k).collect();
    for stream in streams {
        run(d, stream, u64::MAX);
    }
}

/// Runs `stream`'s work up to position `upto`. A fault loses the context (sticky); the work
/// queued after it in a lost context is dropped.
///
/// A kernel computes with the lock released, taking it for each load and store, as a GPU runs
/// kernels while the host's other driver calls (a launch, a copy queued, an allocation) return
/// at once: a caller that waits for a kernel holds up no other thread's calls. The stream is
/// marked running meanwhile, so its later work, and any other thread waiting for it, waits for
/// the kernel. Copies, memsets and frees run holding the lock.
pub fn run(d: &mut Guard, stream: u64, upto: u64) {
    loop {
        while d.streams.get(&stream).is_some_and(|s| s.running) {
            KERNEL_ENDED.wait(d);
        }
        let Some(s) = d.streams.get_mut(&stream) else { return };
        let context = s.context;
        match s.queue.front() {
            Some((seq, _)) if *seq <= upto => {}
            _ => return,
        }
        let (_, op) = s.queue.pop_front().expect("front exists");
        if d.contexts.get(&context).is_none_or(|c| c.lost.is_some()) {
            continue;
        }
        let ran = match op {
            Op::Launch { name, args, shape, variables } => {
                d.streams.get_mut(&stream).expect("stream seen").running = true;
                let driver = MutexGuard::mutex(d);
                let ran = MutexGuard::unlocked(d, || {
                    launch(&name, &args, shape, &mut SharedMemory { driver, context, held: Vec::new(), variables })
                });
                if let Some(s) = d.streams.get_mut(&stream) {
                    s.running = false;
                }
                KERNEL_ENDED.notify_all();
                ran
            }
            op => d.execute(context, op),
        };
        if ran.is_none() {
            d.fault(context);
        }
    }
}

/// Runs kernel `name`; `None`: it faulted. The builtins run from `kernels.cu`'s own source
/// ([`host`]), the test fixtures as [`kernels::run`] and [`fixtures::run`] describe them.
fn launch(name: &str, args: &[Vec<u8>], shape: kernels::Shape, memory: &mut SharedMemory) -> Option<()> {
    match name {
        #[cfg(test)]
        tests::GATE_KERNEL => tests::gate(),
        _ if host::signature(name).is_some() => {
            let ran = host::launch(name, args, shape.grid, shape.block, &mut |address| memory.resolve(address));
            memory.release(name).and(ran)
        }
        _ if fixtures::signature(name).is_some() => fixtures::run(name, args, shape, memory),
        _ => kernels::run(name, args, shape, memory),
    }
}

/// A context's device memory as a kernel sees it: each access takes the driver's lock.
struct SharedMemory<'a> {
    driver: &'a Mutex<Driver>,
    context: u64,
    /// The allocations (by base address) a builtin kernel holds host pointers into.
    held: Vec<u64>,
    /// The kernel's module's variables.
    variables: crate::state::Variables,
}

impl SharedMemory<'_> {
    /// `f` on the `len` bytes at `address`, if they lie within one allocation of the context.
    fn with<T>(&self, address: u64, len: usize, f: impl FnOnce(&mut [u8]) -> T) -> Option<T> {
        let mut d = self.driver.lock();
        let (a, at) = d.locate(self.context, address, len)?;
        Some(f(&mut a.bytes[at..at + len]))
    }

    /// The host memory behind `address`, for a builtin kernel's pointer parameter: the
    /// allocation is held (a free from another stream meanwhile is a violation, and it is
    /// kept) until [`release`](Self::release).
    fn resolve(&mut self, address: u64) -> Option<*mut u8> {
        let mut d = self.driver.lock();
        let (a, at) = d.locate(self.context, address, 0)?;
        a.users += 1;
        self.held.push(address - at as u64);
        // SAFETY: `at` is within the allocation (or at its end); its bytes never move (it never
        // grows).
        Some(unsafe { a.bytes.as_mut_ptr().add(at) })
    }

    /// Lets the allocations go after kernel `name` ended; `None` (a fault) where it wrote past
    /// one of them.
    fn release(&mut self, name: &str) -> Option<()> {
        let mut d = self.driver.lock();
        let mut intact = true;
        for base in self.held.drain(..) {
            let d = &mut *d;
            let retired = d.retired.iter_mut().find(|(at, _)| *at == base).map(|(_, a)| a);
            if let Some(a) = d.memory.get_mut(&base).or(retired) {
                a.users -= 1;
                intact &= a.guard_intact();
            }
        }
        if !intact {
            d.violation(format!("kernel `{name}` wrote past the end of an allocation"));
        }
        intact.then_some(())
    }
}

impl kernels::Memory for SharedMemory<'_> {
    fn variable(&self, name: &str) -> Option<u64> {
        self.variables.get(name).map(|&(address, _)| address)
    }

    fn load(&mut self, address: u64, n: usize) -> Option<Vec<f32>> {
        self.with(address, n.checked_mul(4)?, |bytes| {
            bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4"))).collect()
        })
    }

    fn store(&mut self, address: u64, values: &[f32]) -> Option<()> {
        self.store_u32(address, &values.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
    }

    fn store_u32(&mut self, address: u64, values: &[u32]) -> Option<()> {
        self.with(address, values.len().checked_mul(4)?, |bytes| {
            for (dst, v) in bytes.chunks_exact_mut(4).zip(values) {
                dst.copy_from_slice(&v.to_le_bytes());
            }
        })
    }

    fn print(&mut self, text: &str) {
        let mut d = self.driver.lock();
        let Some(context) = d.contexts.get_mut(&self.context) else { return };
        // The printf buffer holds its limit's bytes; a GPU drops what does not fit.
        if context.printed.len() + text.len() <= context.limits[1] {
            context.printed.extend_from_slice(text.as_bytes());
        }
    }

    fn object(&self, value: u64) -> Option<crate::textures::Object> {
        self.driver.lock().objects.get(&value).filter(|o| o.context == self.context).cloned()
    }
}

impl Driver {
    /// Runs one operation other than a launch, holding the lock; `None`: it faulted.
    fn execute(&mut self, context: u64, op: Op) -> Option<()> {
        if let (Some(delay), Op::HtoD { .. } | Op::DtoH { .. }) = (self.copy_delay, &op) {
            std::thread::sleep(delay);
        }
        match op {
            Op::HtoD { dst, src, len } => {
                if let Some(budget) = self.host_to_device_budget {
                    self.host_to_device_budget = budget.checked_sub(len);
                    if len > budget {
                        return None; // the injected DMA fault: sticky, as every fault here
                    }
                }
                // SAFETY: the caller promised that `src` holds `len` bytes until this copy is
                // known complete (the contract under test); reading it now is the driver's right.
                let host = unsafe { std::slice::from_raw_parts(src as *const u8, len) };
                let (a, at) = self.locate(context, dst, len)?;
                a.bytes[at..at + len].copy_from_slice(host);
            }
            Op::DtoH { dst, src, len } => {
                let (a, at) = self.locate(context, src, len)?;
                // SAFETY: as above, for the destination.
                let host = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
                host.copy_from_slice(&a.bytes[at..at + len]);
            }
            Op::DtoD { dst, src, len } => {
                let (a, at) = self.locate(context, src, len)?;
                let bytes = a.bytes[at..at + len].to_vec();
                let (b, to) = self.locate(context, dst, len)?;
                b.bytes[to..to + len].copy_from_slice(&bytes);
            }
            Op::Memset { dst, value, len } => {
                let (a, at) = self.locate(context, dst, len)?;
                a.bytes[at..at + len].fill(value);
            }
            Op::Launch { .. } => unreachable!("launches run with the lock released (`run`)"),
            Op::Record => {}
            Op::Free { address } => self.release(address),
        }
        Some(())
    }

    /// A fault in `context`: lost (sticky), and unless faults are confined, every context.
    fn fault(&mut self, context: u64) {
        if let Some(c) = self.contexts.get_mut(&context) {
            c.lost = Some(code::ILLEGAL_ADDRESS);
        }
        if !self.fault_confined {
            self.process_poisoned = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Arc, Barrier};

    use super::*;
    use crate::state::{Stream, STALE_BYTE};

    /// A driver after `cuInit`, adjusted.
    fn initialized(adjust: impl FnOnce(&mut Driver)) -> Driver {
        let mut d = Driver::default();
        d.initialized = true;
        adjust(&mut d);
        d
    }

    /// A kernel that computes until the test lets it go: [`gate`].
    pub const GATE_KERNEL: &str = "standin_test_gate";
    /// Met by the gate kernel once it runs, and by the test.
    static ENTERED: Barrier = Barrier::new(2);
    /// Met by the gate kernel before it ends, and by the test when it lets it go.
    static RELEASED: Barrier = Barrier::new(2);

    /// The gate kernel's body: tells the test it runs, then waits for the test's word.
    pub fn gate() -> Option<()> {
        ENTERED.wait();
        RELEASED.wait();
        Some(())
    }

    #[test]
    fn a_running_kernel_holds_up_no_other_call_and_its_stream_waits_for_it() {
        let driver = Arc::new(Mutex::new(initialized(|_| {})));
        let (context, stream, address) = {
            let mut d = driver.lock();
            let context = d.create_context(0, false).unwrap();
            let stream = d.stream(context, 0).unwrap();
            let address = d.alloc(context, 16).unwrap();
            let shape = kernels::Shape::of([1, 1, 1], [1, 1, 1]);
            d.queue(
                stream,
                Op::Launch { name: GATE_KERNEL.into(), args: vec![], shape, variables: Default::default() },
            );
            (context, stream, address)
        };
        let waiter = {
            let driver = driver.clone();
            std::thread::spawn(move || run(&mut driver.lock(), stream, u64::MAX))
        };
        ENTERED.wait();
        // The kernel computes on the waiter's thread: the lock is free for every other call.
        let other_stream = {
            let mut d = driver.try_lock().expect("no lock held while a kernel computes");
            assert!(d.streams[&stream].running);
            let other = d.handle();
            d.streams.insert(other, Stream::new(context));
            d.queue(stream, Op::Memset { dst: address, value: 7, len: 16 });
            d.queue(other, Op::Memset { dst: address + 8, value: 9, len: 8 });
            other
        };
        // The other stream runs at once; this one's memset waits for the kernel, even for a
        // second thread that waits for the stream meanwhile.
        run(&mut driver.lock(), other_stream, u64::MAX);
        let (locked, told) = mpsc::channel();
        let second = {
            let driver = driver.clone();
            std::thread::spawn(move || {
                let mut d = driver.lock();
                locked.send(()).unwrap();
                run(&mut d, stream, u64::MAX);
            })
        };
        told.recv().unwrap();
        {
            // Taken only once the second waiter let the lock go: it waits for the kernel.
            let mut d = driver.lock();
            let (a, at) = d.locate(context, address, 16).unwrap();
            assert_eq!(a.bytes[at..at + 16], [[STALE_BYTE; 8], [9; 8]].concat(), "the memset behind the kernel waits");
        }
        RELEASED.wait();
        waiter.join().unwrap();
        second.join().unwrap();
        let mut d = driver.lock();
        assert!(!d.streams[&stream].running);
        let (a, at) = d.locate(context, address, 16).unwrap();
        assert_eq!(a.bytes[at..at + 16], [7; 16], "run in order after the kernel");
        assert!(d.usable(context).is_ok());
    }

    #[test]
    fn an_injected_dma_fault_arrives_when_the_copy_runs_and_sticks() {
        let driver = Mutex::new(initialized(|d| d.host_to_device_budget = Some(8)));
        let mut d = driver.lock();
        let context = d.create_context(0, false).unwrap();
        let address = d.alloc(context, 64).unwrap();
        let stream = d.stream(context, 0).unwrap();
        let host = [7u8; 16];
        d.queue(stream, Op::HtoD { dst: address, src: host.as_ptr() as usize, len: 8 });
        d.queue(stream, Op::HtoD { dst: address + 8, src: host.as_ptr() as usize, len: 8 });
        assert!(d.usable(context).is_ok(), "queued, not run: no fault yet");
        run(&mut d, stream, u64::MAX);
        assert_eq!(d.usable(context).unwrap_err(), code::ILLEGAL_ADDRESS);
        assert!(d.process_poisoned, "by default a fault breaks the whole process");
        d.fault_confined = true;
        d.process_poisoned = false;
        assert_eq!(d.usable(context).unwrap_err(), code::ILLEGAL_ADDRESS, "sticky");
    }

    #[test]
    fn a_shim_kernel_past_its_allocation_faults() {
        let driver = Mutex::new(initialized(|d| d.fault_confined = true));
        let mut d = driver.lock();
        let context = d.create_context(0, false).unwrap();
        let x = d.alloc(context, 64 * 4).unwrap();
        let stream = d.stream(context, 0).unwrap();
        let shape = kernels::Shape::of([1, 1, 1], [128, 1, 1]);
        let iota = |n: u32| vec![x.to_ne_bytes().to_vec(), n.to_ne_bytes().to_vec()];
        let variables = crate::state::Variables::default();
        d.queue(
            stream,
            Op::Launch { name: kernels::IOTA_KERNEL.into(), args: iota(64), shape, variables: variables.clone() },
        );
        run(&mut d, stream, u64::MAX);
        let (a, at) = d.locate(context, x, 64 * 4).unwrap();
        assert_eq!(a.bytes[at + 63 * 4..at + 64 * 4], 63u32.to_le_bytes(), "iota within its 64 words");
        assert!(d.usable(context).is_ok());
        d.queue(stream, Op::Launch { name: kernels::IOTA_KERNEL.into(), args: iota(65), shape, variables });
        run(&mut d, stream, u64::MAX);
        assert_eq!(d.usable(context).unwrap_err(), code::ILLEGAL_ADDRESS, "word 64 is past the allocation");
    }
}
