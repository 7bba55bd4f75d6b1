//! NVIDIA's Multi-Process Service, opt-in per GPU (`mps_devices`): the backend runs one MPS
//! control daemon per such GPU, with a pipe directory of its own under the state directory, and
//! starts that GPU's session workers as its clients, each with a share of the GPU's threads and
//! a limit on the device memory it may pin. The sessions' kernels then run concurrently instead
//! of time-sliced, and a session costs less device memory.
//!
//! The price: MPS clients share one GPU address space in the MPS server, so a fatal fault in
//! one session (an illegal address) ends every session of that GPU, not only its own. Turn it
//! on only for GPUs whose programs are trusted not to fault (docs/admin.md, "GPU hosts").

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What `nvidia-cuda-mps-control` is looked for as when `mps_control` is unset.
pub const DEFAULT_CONTROL: &str = "nvidia-cuda-mps-control";

/// A running MPS control daemon for one GPU; asked to quit when dropped.
#[derive(Debug)]
pub struct MpsDaemon {
    control: PathBuf,
    uuid: String,
    pipes: PathBuf,
    logs: PathBuf,
}

impl MpsDaemon {
    /// Starts `control -d` for the GPU (or MIG instance) `uuid`, with its pipe and log
    /// directories under `dir`.
    pub fn start(control: &Path, uuid: &str, dir: &Path) -> Result<Self, String> {
        let daemon = Self {
            control: control.to_path_buf(),
            uuid: uuid.to_string(),
            pipes: dir.join("pipe"),
            logs: dir.join("log"),
        };
        for d in [&daemon.pipes, &daemon.logs] {
            std::fs::create_dir_all(d).map_err(|e| format!("MPS for {uuid}: {}: {e}", d.display()))?;
        }
        // One left by a backend that did not stop in order (killed, crashed) would refuse -d.
        daemon.quit();
        let status = daemon
            .command()
            .arg("-d")
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("MPS for {uuid}: cannot run {}: {e}", control.display()))?;
        if !status.success() {
            return Err(format!(
                "MPS for {uuid}: {} -d failed ({status}); see {}",
                control.display(),
                daemon.logs.display()
            ));
        }
        tracing::info!(gpu = uuid, pipes = %daemon.pipes.display(), "MPS control daemon started");
        Ok(daemon)
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.control);
        command
            .env("CUDA_VISIBLE_DEVICES", &self.uuid)
            .env("CUDA_MPS_PIPE_DIRECTORY", &self.pipes)
            .env("CUDA_MPS_LOG_DIRECTORY", &self.logs);
        command
    }

    /// The environment of a session worker that is this daemon's client: its pipes, its share
    /// of the GPU's threads (percent) and the device memory it may pin (MiB; CUDA device 0 is
    /// the worker's one GPU).
    pub fn client_env(&self, thread_percentage: u32, pinned_mib: u64) -> Vec<(OsString, OsString)> {
        vec![
            ("CUDA_MPS_PIPE_DIRECTORY".into(), self.pipes.clone().into()),
            ("CUDA_MPS_LOG_DIRECTORY".into(), self.logs.clone().into()),
            ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), thread_percentage.to_string().into()),
            ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(), format!("0={pinned_mib}M").into()),
        ]
    }
}

impl Drop for MpsDaemon {
    fn drop(&mut self) {
        self.quit();
    }
}

impl MpsDaemon {
    /// Asks the control daemon on this pipe directory, if one runs, to quit.
    fn quit(&self) {
        use std::io::Write;
        let quit = self.command().stdin(Stdio::piped()).stdout(Stdio::null()).spawn().and_then(|mut child| {
            if let Some(mut input) = child.stdin.take() {
                input.write_all(b"quit\n")?;
            }
            child.wait()
        });
        match quit {
            Ok(_) => tracing::info!(gpu = self.uuid, "MPS control daemon asked to quit"),
            Err(e) => tracing::warn!(gpu = self.uuid, error = %e, "cannot ask the MPS control daemon to quit"),
        }
    }
}
