//! Tasks the SDK starts on the program's runtime and owns: dropping the owner stops the task.

use tokio::task::JoinHandle;

/// A spawned task that is aborted when this is dropped, so that it stops with the handle that
/// started it (the port watch with its accelerator, the manager's watcher with its session).
#[derive(Debug)]
pub(crate) struct Owned<T>(JoinHandle<T>);

impl<T: Send + 'static> Owned<T> {
    /// Spawns `task` on the current runtime.
    pub(crate) fn spawn(task: impl std::future::Future<Output = T> + Send + 'static) -> Self {
        Self(tokio::spawn(task))
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
