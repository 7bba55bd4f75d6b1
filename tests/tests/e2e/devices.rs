//! One backend, several devices: the backend serves each device of its host as its own
//! accelerator, the resource manager hands them out one by one, and capabilities name one device.
//! Also the device choice at start-up (`--device cuda|auto`) on a host without a GPU.

use std::process::Command;

use ac_frontend::Session;
use ac_tests::{computes, workspace_binary, TestBackend, TestCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_backend_serves_each_of_its_devices_separately() {
    let tb = TestBackend::start_with(|c| {
        c.devices = Some(vec![0, 2]);
        c.memory_mib = 64;
    })
    .await;
    let infos = tb.backend.devices();
    assert_eq!(infos.iter().map(|d| d.index).collect::<Vec<_>>(), vec![0, 2]);

    let mut options = tb.options();
    options.device = 2;
    let on_2 = ac_frontend::Accelerator::connect(&options).await.unwrap();
    assert_eq!(on_2.info().index, 2);
    let on_0 = tb.connect().await;
    assert_eq!(on_0.info().index, 0);
    computes(&on_2).await.unwrap();
    computes(&on_0).await.unwrap();

    // Memory is per device: filling device 2 leaves device 0 untouched.
    let _big = on_2.alloc::<u8>(60 << 20).await.unwrap();
    let err = on_2.alloc::<u8>(8 << 20).await.unwrap_err();
    assert!(err.to_string().contains("out of device memory"), "{err}");
    let _fine = on_0.alloc::<u8>(60 << 20).await.unwrap();
    assert!(on_0.device_info().await.unwrap().memory_free < 5 << 20);

    // A device the backend does not serve: a clear refusal, and the backend goes on.
    options.device = 1;
    let err = ac_frontend::Accelerator::connect(&options).await.unwrap_err();
    assert!(err.to_string().contains("no device 1 here (devices: [0, 2])"), "{err}");
    computes(&on_0).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_allocates_every_device_of_a_host_and_capabilities_name_one() {
    let mut c = TestCluster::start(0).await;
    c.backends.push(TestBackend::start_with(|cfg| cfg.devices = Some(vec![0, 1])).await);
    c.add_host(0).await;
    let hosts = c.hosts().await;
    let ids: Vec<&str> = hosts[0].accelerators.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["h0/0", "h0/1"]);

    let credential = c.submit("two", &["n1"], 2).await;
    let session = Session::init(c.session_options("two", &credential, "n1")).await.unwrap();
    let mut indexes: Vec<u32> = session.accelerators().iter().map(|h| h.acc.info().index).collect();
    indexes.sort();
    assert_eq!(indexes, [0, 1], "each device of the host is one accelerator");
    for handle in session.accelerators() {
        computes(&handle.acc).await.unwrap();
    }

    // The capability for one device does not open the other.
    let client = ac_frontend::arm::ArmClient::connect(c.arm_options()).await.unwrap();
    let auth = ac_proto::arm::JobAuth::Credential { job: "two".into(), secret: credential.clone() };
    let grants = match client
        .request(ac_proto::arm::Request::Init { auth, node: "n1".into(), token: ac_proto::random_hex(32) })
        .await
        .unwrap()
    {
        ac_proto::arm::Response::Session { state: ac_proto::arm::SessionState::Bound(grants), .. } => grants,
        other => panic!("unexpected {other:?}"),
    };
    let mut options = c.backends[0].options();
    options.capability = grants[0].capability.clone();
    options.device = 1 - grants[0].device;
    let err = ac_frontend::Accelerator::connect(&options).await.unwrap_err();
    assert!(err.to_string().contains(&format!("capability is for device {}", grants[0].device)), "{err}");
    options.device = grants[0].device;
    computes(&ac_frontend::Accelerator::connect(&options).await.unwrap()).await.unwrap();
    session.finalize().await.unwrap();
}

/// Whether this host has an NVIDIA driver (then the CUDA start-up paths behave differently).
fn has_driver() -> bool {
    ac_backend::device::cuda::driver::driver_present()
}

/// An `ac-backend` command for `--device device`, with the state directory it uses.
fn backend_with(device: &str) -> (Command, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(workspace_binary("ac-backend"));
    cmd.args(["--listen", "127.0.0.1:0", "--memory-mib", "16", "--device", device])
        .arg("--state-dir")
        .arg(state.path())
        .env("RUST_LOG", "info");
    (cmd, state)
}

#[test]
fn device_cuda_without_a_driver_fails_clearly() {
    if has_driver() {
        ac_tests::skip(
            "AC_NO_DRIVER_REQUIRED",
            "this host has an NVIDIA driver: scripts/gpu-check covers --device cuda",
        );
        return;
    }
    let (mut cmd, _state) = backend_with("cuda");
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no usable CUDA device: libcuda.so was not found: no NVIDIA driver on this host"),
        "{stderr}"
    );
}

#[test]
fn device_auto_without_a_driver_falls_back_to_the_cpu_and_says_so() {
    if has_driver() {
        ac_tests::skip(
            "AC_NO_DRIVER_REQUIRED",
            "this host has an NVIDIA driver: scripts/gpu-check covers --device auto",
        );
        return;
    }
    let (mut cmd, _state) = backend_with("auto");
    let mut child = cmd.stderr(std::process::Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let mut seen = Vec::new();
    let found = loop {
        match lines.next() {
            Some(Ok(line)) => {
                let done = line.contains("device 0: CPU device");
                seen.push(line);
                if done {
                    break true;
                }
            }
            _ => break false,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let text = seen.join("\n");
    assert!(found, "{text}");
    assert!(
        text.contains("no usable CUDA device (libcuda.so was not found")
            && text.contains("falling back to the CPU device"),
        "{text}"
    );
}
