//! One thread per GPU for the driver calls that release things: `cuMemFree` (which waits for
//! the device) and `cuCtxDestroy` (which waits for the context's work and tears it down).
//! They are reached from `Drop`s, which run wherever the last reference goes, often a Tokio
//! worker thread; on that thread they would stall every task behind them (issue 24, finding 4).
//! Jobs run in the order they were handed over, so a context's frees run before its
//! destruction.

use std::sync::mpsc;
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send>;

enum Message {
    Run(Job),
    /// Answers once every job handed over before it has run.
    Flush(mpsc::SyncSender<()>),
}

/// The releasing thread of one GPU. Dropping it runs the jobs left and joins the thread.
#[derive(Debug)]
pub struct Janitor {
    tx: Option<mpsc::Sender<Message>>,
    thread: Option<JoinHandle<()>>,
}

impl Janitor {
    /// Starts the thread, named `name`.
    pub fn start(name: String) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Message>();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            for message in rx {
                match message {
                    Message::Run(job) => job(),
                    Message::Flush(done) => {
                        let _ = done.send(());
                    }
                }
            }
        })?;
        Ok(Self { tx: Some(tx), thread: Some(thread) })
    }

    /// Runs `job` on the thread, after the jobs handed over before it; inline if the thread is
    /// gone (never while the GPU lives).
    pub fn defer(&self, job: impl FnOnce() + Send + 'static) {
        let job: Job = Box::new(job);
        if let Some(Err(mpsc::SendError(Message::Run(job)))) = self.tx.as_ref().map(|tx| tx.send(Message::Run(job))) {
            job();
        }
    }

    /// Whether the caller is the janitor's own thread (a job), which must not wait for itself.
    fn on_own_thread(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| t.thread().id() == std::thread::current().id())
    }

    /// Waits until every job handed over so far has run (an allocation that failed for want of
    /// memory retries after the frees in flight). From a job: returns at once.
    pub fn flush(&self) {
        if self.on_own_thread() {
            return;
        }
        let (done, wait) = mpsc::sync_channel(1);
        if self.tx.as_ref().is_some_and(|tx| tx.send(Message::Flush(done)).is_ok()) {
            let _ = wait.recv();
        }
    }
}

impl Drop for Janitor {
    fn drop(&mut self) {
        let own = self.on_own_thread();
        drop(self.tx.take());
        // Dropped by one of its own jobs (the job held the last reference to the GPU): the
        // thread ends by itself once that job and the queue are done.
        if let Some(thread) = self.thread.take().filter(|_| !own) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex as StdMutex};

    #[test]
    fn jobs_run_in_order_and_all_run_before_the_drop_returns() {
        let janitor = Janitor::start("test-janitor".into()).unwrap();
        let log = Arc::new(StdMutex::new(Vec::new()));
        for i in 0..100 {
            let log = log.clone();
            janitor.defer(move || log.lock().unwrap().push(i));
        }
        janitor.flush();
        assert_eq!(*log.lock().unwrap(), (0..100).collect::<Vec<_>>());
        let last = log.clone();
        janitor.defer(move || last.lock().unwrap().push(100));
        drop(janitor);
        assert_eq!(log.lock().unwrap().len(), 101);
    }

    #[test]
    fn a_job_may_flush_and_drop_its_own_janitor() {
        let janitor = Arc::new(StdMutex::new(Some(Janitor::start("test-janitor".into()).unwrap())));
        let (done, finished) = std::sync::mpsc::channel();
        let inside = janitor.clone();
        janitor.lock().unwrap().as_ref().unwrap().defer(move || {
            let own = inside.lock().unwrap().take().unwrap();
            own.flush();
            drop(own);
            done.send(()).unwrap();
        });
        finished.recv().unwrap();
        assert!(janitor.lock().unwrap().is_none());
    }
}
