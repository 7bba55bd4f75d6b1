// shape: one seed builder per message type, a list that follows the protocols' types.
//! Seeds made by the project's own encoders (messages, sealed records, SWF written by the
//! simulator): valid inputs start the fuzzer deep inside the decoders instead of at their first
//! length check. Each input's layout (a selector
//! byte, piece sizes, frames) is its target's.
//!
//! `AC_FUZZ_WRITE_SEEDS=1 cargo test --manifest-path fuzz/Cargo.toml` writes them to
//! `fuzz/seeds/<target>/gen-*`; without the variable the test checks that the committed files
//! are what the encoders make now, so a protocol change that leaves them stale fails.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use ac_proto::arm::{
    self, AcceleratorView, ArmError, ArmErrorKind, ArmRequest, ArmResponse, Ask, HostView, JobAuth, JobView,
    Preemption, ReservationView, Route, SessionState, UsageBy, UsageRow,
};
use ac_proto::backend::{
    BufferId, BulkHeader, DeviceInfo, DeviceKind, DevicePtr, Direction, Envelope, ErrorKind, FunctionId, Heartbeat,
    Hello, KernelArg, LaunchDims, ModuleId, ModuleSource, ParamKind, Preamble, Reply, Report, Request, Response,
    Revoke, SessionId, StreamId, WireError,
};
use ac_proto::capability::{Grant, Signer};
use ac_proto::codec;
use ac_proto::frame::encode_frame;
use ac_proto::lane::record::Sealer;
use ac_proto::lane::tokio_rustls::rustls::crypto::cipher::{AeadKey, Iv};
use ac_proto::lane::tokio_rustls::rustls::ConnectionTrafficSecrets;
use arm_server::model::{DynSet, Holder, Host, Job, JobState, Loan, PendingGet, Reservation, Session};
use serde::Serialize;

/// One seed: its target, its file name (without the `gen-` prefix), its bytes.
type Seed = (&'static str, String, Vec<u8>);

fn encoded<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut out = Vec::new();
    codec::encode_into(msg, &mut out).expect("encodes");
    out
}

/// `which` (a target's selector byte) followed by the encoding of `msg`.
fn selected<T: Serialize>(which: u8, msg: &T) -> Vec<u8> {
    let mut out = vec![which];
    out.extend(encoded(msg));
    out
}

fn addr() -> SocketAddr {
    "192.0.2.7:7000".parse().expect("an address")
}

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

fn device_info() -> DeviceInfo {
    DeviceInfo {
        index: 0,
        name: "NVIDIA H100".into(),
        kind: DeviceKind::Cuda,
        compute_capability: Some((9, 0)),
        memory_total: 80 << 30,
        memory_free: 79 << 30,
    }
}

fn ptr(buffer: u64, offset: u64) -> DevicePtr {
    DevicePtr { buffer: BufferId(buffer), offset }
}

fn requests() -> Vec<(&'static str, Request)> {
    vec![
        ("ping", Request::Ping),
        ("info", Request::DeviceInfo),
        ("alloc", Request::MemAlloc { bytes: 1 << 20 }),
        ("free", Request::MemFree { buffer: BufferId(1) }),
        ("write", Request::MemWrite { dst: ptr(1, 8), len: 16, stream: StreamId(0) }),
        ("write-sync", Request::MemWriteSync { dst: ptr(1, 0), len: 8 }),
        ("read-sync", Request::MemReadSync { src: ptr(1, 0), len: 4096 }),
        ("copy", Request::MemCopy { dst: ptr(2, 0), src: ptr(1, 64), len: 64, stream: StreamId(1) }),
        ("memset", Request::Memset { dst: ptr(1, 0), len: 256, value: 0xab, stream: StreamId(0) }),
        ("load-builtin", Request::ModuleLoad { source: ModuleSource::Builtin("builtin".into()), len: 0 }),
        ("load-ptx", Request::ModuleLoad { source: ModuleSource::Ptx, len: 12 }),
        ("load-cubin", Request::ModuleLoad { source: ModuleSource::Cubin, len: 12 }),
        (
            "load-cudac",
            Request::ModuleLoad {
                source: ModuleSource::CudaC { options: vec!["-DN=4".into(), "-std=c++17".into()] },
                len: 12,
            },
        ),
        ("unload", Request::ModuleUnload { module: ModuleId(3) }),
        ("lookup", Request::FunctionLookup { module: ModuleId(3), name: "saxpy".into() }),
        (
            "launch",
            Request::Launch {
                function: FunctionId(4),
                dims: LaunchDims::new([256, 2, 1], [128, 1, 1]).with_shared_mem(1024),
                args: vec![
                    KernelArg::F32(2.0),
                    KernelArg::Ptr(ptr(1, 0)),
                    KernelArg::Ptr(ptr(2, 16)),
                    KernelArg::U64(1 << 20),
                    KernelArg::U32(7),
                    KernelArg::I32(-7),
                    KernelArg::I64(-1),
                    KernelArg::F64(0.5),
                ],
                stream: StreamId(2),
            },
        ),
        ("stream-create", Request::StreamCreate),
        ("stream-destroy", Request::StreamDestroy { stream: StreamId(2) }),
        ("sync", Request::Synchronize { stream: None }),
        ("sync-stream", Request::Synchronize { stream: Some(StreamId(2)) }),
    ]
}

fn responses() -> Vec<(&'static str, Response)> {
    vec![
        (
            "welcome",
            Response::Welcome { session: SessionId(9), token: [5; 16], info: device_info(), lane_port: 7001, lanes: 4 },
        ),
        ("ok", Response::Ok),
        ("info", Response::Info(DeviceInfo { kind: DeviceKind::Cpu, compute_capability: None, ..device_info() })),
        ("buffer", Response::Buffer(BufferId(1))),
        ("module", Response::Module(ModuleId(3))),
        (
            "function",
            Response::Function {
                id: FunctionId(4),
                params: Some(vec![ParamKind::F32, ParamKind::Ptr, ParamKind::U64]),
            },
        ),
        ("function-unknown", Response::Function { id: FunctionId(5), params: None }),
        ("stream", Response::Stream(StreamId(2))),
        ("devices", Response::Devices(vec![device_info(), DeviceInfo { index: 1, ..device_info() }])),
        ("data", Response::Data { len: 8 }),
        ("error", Response::Error(WireError::new(ErrorKind::OutOfBounds, "offset 8 + 16 > 16"))),
        ("context-lost", Response::Error(WireError::new(ErrorKind::ContextLost, "illegal address"))),
        ("resumed", Response::Resumed { handled: 652 }),
    ]
}

fn hellos() -> Vec<(&'static str, Hello)> {
    vec![
        ("open", Hello::Open { capability: vec![1, 2, 3, 4], device: 0 }),
        ("open-empty", Hello::Open { capability: Vec::new(), device: 1 }),
        (
            "register",
            Hello::Register { public_key: [3; 32], host: "h1".into(), time: 1_700_000_000, proof: vec![9; 64] },
        ),
        (
            "register-cluster",
            Hello::RegisterCluster {
                public_key: [3; 32],
                cluster: vec![[3; 32], [4; 32], [6; 32]],
                host: "h1".into(),
                time: 1_700_000_000,
                proof: vec![9; 64],
            },
        ),
        ("attach", Hello::Attach { session: SessionId(9), token: [5; 16] }),
        ("resume", Hello::Resume { session: SessionId(9), token: [5; 16], capability: vec![1, 2, 3, 4], replies: 38 }),
        ("end", Hello::End { session: SessionId(9), token: [5; 16], capability: vec![1, 2, 3, 4] }),
    ]
}

fn backend_messages() -> Vec<Seed> {
    let mut seeds = Vec::new();
    let mut add = |name: String, bytes| seeds.push(("backend_messages", name, bytes));
    for (name, hello) in hellos() {
        add(format!("hello-{name}"), selected(0, &hello));
    }
    for (i, (name, request)) in requests().into_iter().enumerate() {
        add(format!("envelope-{name}"), selected(1, &Envelope { id: i as u64, request }));
    }
    for (i, (name, response)) in responses().into_iter().enumerate() {
        add(format!("reply-{name}"), selected(2, &Reply { id: i as u64 + 1, response }));
    }
    add(
        "report-heartbeat".into(),
        selected(3, &Report::Heartbeat(Heartbeat { sessions: 2, devices: vec![device_info()] })),
    );
    add("report-revoked".into(), selected(3, &Report::Revoked { capability: 12 }));
    add("revoke".into(), selected(4, &Revoke { capability: 12, expires: 1_700_003_600 }));
    let mut preamble = vec![5];
    preamble.extend(Preamble::CURRENT.to_bytes());
    add("preamble".into(), preamble);
    seeds
}

/// A frame target's input: the first byte's low nibble counts the piece sizes that follow, then
/// the stream.
fn in_pieces(sizes: &[u8], stream: &[u8]) -> Vec<u8> {
    assert!(sizes.len() < 16);
    let mut out = vec![sizes.len() as u8];
    out.extend(sizes);
    out.extend(stream);
    out
}

fn payload_of(request: &Request) -> usize {
    match request {
        Request::MemWrite { len, .. } | Request::MemWriteSync { len, .. } | Request::ModuleLoad { len, .. } => {
            *len as usize
        }
        _ => 0,
    }
}

fn frame() -> Vec<Seed> {
    let mut seeds = Vec::new();
    for (hello_name, hello) in hellos() {
        // A control stream: preamble, hello, then every request with its inline payload.
        let mut control = Preamble::CURRENT.to_bytes().to_vec();
        encode_frame(&hello, &mut control).expect("encodes");
        if hello_name == "open" {
            for (i, (_, request)) in requests().into_iter().enumerate() {
                let payload = payload_of(&request);
                encode_frame(&Envelope { id: i as u64, request }, &mut control).expect("encodes");
                control.extend((0..payload).map(|b| b as u8));
            }
        }
        seeds.push(("frame", format!("control-{hello_name}"), in_pieces(&[], &control)));
        if hello_name == "open" {
            seeds.push(("frame", "control-in-pieces".into(), in_pieces(&[1, 3, 7, 200], &control)));
        }
    }
    // A reply stream: every response, `Data` followed by its payload.
    let mut replies = Vec::new();
    for (i, (_, response)) in responses().into_iter().enumerate() {
        let data = match response {
            Response::Data { len } => len as usize,
            _ => 0,
        };
        encode_frame(&Reply { id: i as u64, response }, &mut replies).expect("encodes");
        replies.extend(std::iter::repeat_n(0xee, data));
    }
    seeds.push(("frame", "replies".into(), in_pieces(&[], &replies)));
    seeds.push(("frame", "replies-in-pieces".into(), in_pieces(&[2, 5], &replies)));
    seeds
}

fn bulk_header() -> Vec<Seed> {
    let write = BulkHeader { direction: Direction::HostToDevice, ptr: ptr(1, 0), len: 32, pipelined: true, after: 3 };
    let read =
        BulkHeader { direction: Direction::DeviceToHost, ptr: ptr(2, 4096), len: 1 << 20, pipelined: false, after: 0 };
    let mut seeds = vec![
        ("bulk_header", "header-write".into(), encoded(&write)),
        ("bulk_header", "header-read".into(), encoded(&read)),
    ];
    // A lane: copies one after another, each host-to-device header followed by its payload.
    let mut lane = Vec::new();
    for header in [write, read, BulkHeader { len: 5, after: 9, ..write }] {
        encode_frame(&header, &mut lane).expect("encodes");
        if header.direction == Direction::HostToDevice {
            lane.extend(std::iter::repeat_n(0x5a, header.len as usize));
        }
    }
    seeds.push(("bulk_header", "lane".into(), in_pieces(&[], &lane)));
    seeds.push(("bulk_header", "lane-in-pieces".into(), in_pieces(&[3, 1, 9], &lane)));
    seeds
}

fn arm_grant(i: u32) -> arm::Grant {
    arm::Grant {
        id: format!("h1/{i}"),
        device: i,
        node: "n1".into(),
        addr: addr(),
        server_name: "h1".into(),
        ca_pem: CA.into(),
        capability: vec![7; 24],
    }
}

fn arm_requests() -> Vec<(&'static str, arm::Request)> {
    use arm::Request as R;
    let token = "t".repeat(arm::MIN_TOKEN_LEN);
    let credential = JobAuth::Credential { job: "j1".into(), secret: "s3cret".into() };
    vec![
        ("init", R::Init { auth: credential.clone(), node: "n1".into(), token: token.clone() }),
        ("init-adhoc", R::Init { auth: JobAuth::AdHoc { acpn: 2 }, node: "n1".into(), token: token.clone() }),
        (
            "init-munge",
            R::Init {
                auth: JobAuth::Munge { job: "7".into(), credential: "MUNGE:AwQ=".into() },
                node: "n1".into(),
                token: token.clone(),
            },
        ),
        (
            "init-same",
            R::Init { auth: JobAuth::SameJob { token: token.clone() }, node: "n2".into(), token: token.clone() },
        ),
        ("poll", R::Poll { token: token.clone() }),
        (
            "get",
            R::Get {
                token: token.clone(),
                ask: Ask { min: 1, max: 4, wait_s: 30, preemptible: true, key: "k1".into() },
            },
        ),
        (
            "collective",
            R::CollectiveGet {
                token: token.clone(),
                parts: vec![("n1".into(), 2), ("n2".into(), 2)],
                key: "k2".into(),
            },
        ),
        (
            "get-elastic",
            R::GetElastic {
                token: token.clone(),
                ask: Ask { min: 1, max: 8, wait_s: 600, preemptible: false, key: "k3".into() },
                notice_s: 30,
            },
        ),
        ("await", R::AwaitGet { token: token.clone(), request: 5 }),
        ("cancel", R::CancelGet { token: token.clone(), request: 5 }),
        ("join", R::JoinSet { token: token.clone(), set: 6 }),
        ("free", R::Free { token: token.clone(), set: 6, accelerators: Some(vec!["h1/0".into()]) }),
        ("finalize", R::Finalize { token: token.clone() }),
        (
            "host-add",
            R::HostAdd {
                addr: "[2001:db8::1]:7000".parse().expect("an address"),
                name: "h1".into(),
                server_name: "h1.example".into(),
                ca_pem: CA.into(),
                labels: vec![("rack".into(), "a".into())],
            },
        ),
        ("host-list", R::HostList),
        ("host-drain", R::HostDrain { name: "h1".into(), drain: true }),
        ("host-remove", R::HostRemove { name: "h1".into(), force: true }),
        (
            "job-submit",
            R::JobSubmit {
                id: "j1".into(),
                nodes: vec!["n1".into(), "n2".into()],
                acpn: 2,
                user: "alice".into(),
                walltime_s: 3600,
                group: Some("physics".into()),
                reservation: Some(3),
                peak: Some(6),
            },
        ),
        (
            "job-bind",
            R::JobBind {
                id: "7".into(),
                nodes: vec!["n1".into()],
                acpn: 0,
                user: "alice".into(),
                uid: 1000,
                walltime_s: 0,
            },
        ),
        ("job-end", R::JobEnd { id: "j1".into() }),
        ("notices", R::Notices { token: token.clone() }),
        ("job-list", R::JobList { all: true }),
        ("job-show", R::JobShow { id: "j1".into() }),
        (
            "reservation-create",
            R::ReservationCreate {
                count: 4,
                start: 1_700_000_000,
                duration_s: 600,
                user: Some("alice".into()),
                job: None,
            },
        ),
        ("reservation-list", R::ReservationList),
        ("reservation-delete", R::ReservationDelete { id: 3 }),
        ("routes", R::Routes { auth: credential, node: "n1".into() }),
        ("health", R::Health),
        ("accounting", R::Accounting { since_ms: Some(1), until_ms: None, by: UsageBy::Group }),
    ]
}

fn arm_responses() -> Vec<(&'static str, ArmResponse)> {
    use arm::Response as R;
    let host = HostView {
        name: "h1".into(),
        addr: addr(),
        state: "up".into(),
        labels: vec![("rack".into(), "a".into())],
        accelerators: vec![AcceleratorView {
            id: "h1/0".into(),
            device: "NVIDIA H100".into(),
            memory: 80 << 30,
            state: "allocated".into(),
            holder: Some("j1".into()),
        }],
    };
    let job = JobView {
        id: "j1".into(),
        user: "alice".into(),
        nodes: vec!["n1".into()],
        acpn: 1,
        group: "physics".into(),
        state: "running".into(),
        submitted: 1_700_000_000,
        walltime_s: 60,
        expected_start: Some(1_700_000_100),
        static_accelerators: vec![("n1".into(), "h1/0".into())],
        dynamic_accelerators: vec![(6, "h1/1".into())],
        waiting_requests: 1,
        reservation: None,
        peak: Some(2),
        preallocated_unused: vec!["h1/2".into()],
    };
    let reservation = ReservationView {
        id: 3,
        count: 2,
        start: 1_700_000_000,
        duration_s: 600,
        user: "alice".into(),
        jobs: vec!["j1".into()],
        state: "planned".into(),
    };
    let ok = ArmResponse::Ok;
    vec![
        ("done", ok(R::Done)),
        (
            "session-bound",
            ok(R::Session { token: "t".into(), job: "j1".into(), state: SessionState::Bound(vec![arm_grant(0)]) }),
        ),
        (
            "session-queued",
            ok(R::Session {
                token: "t".into(),
                job: "j1".into(),
                state: SessionState::Queued { position: 1, needed: 2, free: 0, expected_start: Some(1_700_000_100) },
            }),
        ),
        ("granted", ok(R::Granted { set: 6, grants: vec![arm_grant(1), arm_grant(2)] })),
        ("rejected", ok(R::Rejected { reason: "not enough free accelerators".into() })),
        ("waiting", ok(R::Waiting { request: 5, idle: 0, ahead: 2, deadline: 1_700_000_030 })),
        ("host", ok(R::Host(host.clone()))),
        ("hosts", ok(R::Hosts(vec![host]))),
        ("submitted", ok(R::Submitted { id: "j1".into(), credential: "c".repeat(32) })),
        ("job", ok(R::Job(Box::new(job.clone())))),
        ("jobs", ok(R::Jobs(vec![job]))),
        (
            "notices",
            ok(R::Notices(vec![Preemption { set: 6, accelerators: vec!["h1/1".into()], revoke_at: 1_700_000_060 }])),
        ),
        ("reservation", ok(R::Reservation(reservation.clone()))),
        ("reservations", ok(R::Reservations(vec![reservation]))),
        (
            "routes",
            ok(R::Routes(vec![Route { id: "h1/0".into(), addr: addr(), server_name: "h1".into(), ca_pem: CA.into() }])),
        ),
        ("health", ok(R::Health(vec!["slurm's license pool `ac` has 4, the manager 8".into()]))),
        (
            "accounting",
            ok(R::Accounting {
                since_ms: 0,
                until_ms: 1_700_000_000_000,
                rows: vec![UsageRow {
                    key: "alice".into(),
                    user: Some("alice".into()),
                    group: None,
                    static_ms: 60_000,
                    dynamic_ms: 1_500,
                }],
            }),
        ),
        ("error", ArmResponse::Err(ArmError::new(ArmErrorKind::VersionMismatch, "version 3, this is 4"))),
    ]
}

fn arm_messages() -> Vec<Seed> {
    let mut seeds = Vec::new();
    let mut add = |name: String, bytes| seeds.push(("arm_messages", name, bytes));
    for (name, request) in arm_requests() {
        add(format!("request-{name}"), selected(0, &ArmRequest { version: arm::VERSION, request }));
    }
    for (name, response) in arm_responses() {
        add(format!("response-{name}"), selected(1, &response));
    }
    let mut lent = Holder::using("j1", "n1", None, 0);
    lent.preallocated = true;
    lent.loan = Some(Loan { job: "j2".into(), node: "n2".into(), set: 8, capability: 13 });
    let host = Host {
        name: "h1".into(),
        addr: addr(),
        server_name: "h1".into(),
        ca_pem: CA.into(),
        labels: vec![("rack".into(), "a".into())],
        draining: false,
        up: false,
        devices: vec![
            arm_server::model::Device { index: 0, name: "H100".into(), memory: 80 << 30, holder: None },
            arm_server::model::Device {
                index: 1,
                name: "H100".into(),
                memory: 80 << 30,
                holder: Some(Holder::using("j1", "n1", Some(6), 12)),
            },
            arm_server::model::Device { index: 2, name: "H100".into(), memory: 80 << 30, holder: Some(lent) },
        ],
        mismatch: None,
        states: Default::default(),
    };
    add("host".into(), selected(2, &host));
    let mut job = Job::queued("j1".into(), "alice".into(), "physics".into(), vec!["n1".into()], 2, 60);
    add("job-queued".into(), selected(3, &job));
    job.state = JobState::Running;
    job.started = Some(1_700_000_000);
    job.reservation = Some(3);
    job.peak = Some(4);
    job.batch = Some(arm_server::model::BatchJob { uid: 1000 });
    job.credential_hash = "ab".repeat(32);
    add("job-running".into(), selected(3, &job));
    let set = DynSet {
        id: 6,
        job: "j1".into(),
        session: "cd".repeat(32),
        accelerators: vec!["h1/1".into(), "h1/2".into()],
        collective: true,
        key: "k1".into(),
    };
    add("dynset".into(), selected(4, &set));
    add("session".into(), selected(5, &Session { token_hash: "cd".repeat(32), job: "j1".into(), node: "n1".into() }));
    let pending = PendingGet {
        id: 7,
        job: "j1".into(),
        session: "cd".repeat(32),
        node: "n1".into(),
        min: 1,
        max: 2,
        preemptible: false,
        deadline: 1_700_000_030,
        key: "k3".into(),
        rejected: Some("deadline passed".into()),
    };
    add("pending-get".into(), selected(6, &pending));
    let reservation = Reservation { id: 3, count: 2, start: 1_700_000_000, duration: 600, user: "alice".into() };
    add("reservation".into(), selected(7, &reservation));
    let ledger = arm_sched::Ledger {
        interval_start: Some(1_700_000_000),
        users: BTreeMap::from([("alice".into(), 120.5), ("bob".into(), 3.0)]),
        groups: BTreeMap::from([("physics".into(), 123.5)]),
        caused: BTreeMap::from([("alice".into(), 400.0)]),
        worst: BTreeMap::from([("alice".into(), 130.0)]),
    };
    add("ledger".into(), selected(8, &ledger));
    seeds
}

fn capability() -> Vec<Seed> {
    // A fixed key: the seeds must not change from one run to the next.
    let signer = Signer::from_pkcs8(&fixed_pkcs8()).expect("the fixed key loads");
    let grant = Grant { id: 7, job: "j1".into(), host: "h1".into(), device: 0, expires: 2_000 };
    let mut raw = vec![0];
    raw.extend(signer.issue(&grant));
    let hex: String = signer.public_key().iter().map(|b| format!("{b:02x}")).collect();
    vec![
        // Signed by another key than the target's: decodes, fails the signature check.
        ("capability", "issued".into(), raw),
        ("capability", "grant-signed".into(), selected(1, &grant)),
        ("capability", "grant-issued".into(), selected(2, &grant)),
        ("capability", "grant-expired".into(), selected(2, &Grant { expires: 0, ..grant })),
        ("capability", "key-hex".into(), [&[3][..], hex.as_bytes(), b"\n"].concat()),
    ]
}

/// An Ed25519 PKCS#8 v2 document from a fixed seed (RFC 8410's layout, with the public key,
/// which ring requires).
fn fixed_pkcs8() -> Vec<u8> {
    use ring::signature::{Ed25519KeyPair, KeyPair};
    let seed = [42u8; 32];
    let public = Ed25519KeyPair::from_seed_unchecked(&seed).expect("a key from a seed").public_key().as_ref().to_vec();
    let mut doc = vec![0x30, 0x51, 0x02, 0x01, 0x01, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
    doc.extend(seed);
    doc.extend([0x81, 0x21, 0x00]);
    doc.extend(public);
    doc
}

fn lane_records() -> Vec<Seed> {
    let secrets = || (0, ConnectionTrafficSecrets::Aes256Gcm { key: AeadKey::from([7; 32]), iv: Iv::from([9; 12]) });
    // Records sealed with the target's AES-256-GCM key, in the order its opener expects: they
    // open (the first byte, 23, also selects AES and pieces of 23 x 67 bytes).
    let mut sealer = Sealer::new(secrets()).expect("a sealer");
    let mut wire = Vec::new();
    sealer.seal(b"hello, lane", &mut wire).expect("seals");
    sealer.seal(&[0xa5; 300], &mut wire).expect("seals");
    sealer.seal_inner(&[b'x', b'y', 23, 0, 0, 0], &mut wire).expect("seals");
    let mut close = [0u8; ac_proto::lane::record::CLOSE_RECORD];
    let n = sealer.seal_close(&mut close).expect("seals");
    wire.extend(&close[..n]);
    let inner = |first: u8| {
        let mut out = vec![first];
        out.extend(b"data\x17");
        out.extend([1, 0, 21]);
        out.extend([b'z'; 40]);
        out.extend([22, 0, 0]);
        out
    };
    vec![
        ("lane_records", "sealed-aes".into(), wire),
        ("lane_records", "inner-types-aes".into(), inner(0x01)),
        ("lane_records", "inner-types-chacha".into(), inner(0x81)),
        ("lane_records", "header-only".into(), vec![23, 3, 3, 0, 17]),
    ]
}

fn module_image() -> Vec<Seed> {
    // A fatbin header (magic, version, header size 16, body size) around a small ELF header.
    let mut elf = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0x33];
    elf.resize(64, 0);
    let mut fatbin = 0xBA55_ED50u32.to_le_bytes().to_vec();
    fatbin.extend(1u16.to_le_bytes());
    fatbin.extend(16u16.to_le_bytes());
    fatbin.extend((elf.len() as u64).to_le_bytes());
    fatbin.extend(&elf);
    vec![("module_image", "fatbin".into(), fatbin), ("module_image", "elf-header".into(), elf)]
}

/// Workloads the simulator makes, written as SWF (the dynamic ESP's first jobs only: a long
/// seed slows every execution that mutates it).
fn swf() -> Vec<Seed> {
    let mut esp = arm_sim::esp::dynamic_esp(1, 32);
    esp.jobs.truncate(12);
    vec![
        ("swf", "synthetic".into(), arm_sim::esp::synthetic(12, 16, 1).to_swf("synthetic").into_bytes()),
        ("swf", "dynamic-esp".into(), esp.to_swf("dynamic ESP").into_bytes()),
    ]
}

/// CUDA C with the options the filter allows, one per line after a NUL.
fn nvrtc_filter() -> Vec<Seed> {
    let source = "#define N 4\n// a comment\nextern \"C\" __global__ void k(float *x) {\n  x[threadIdx.x] = N;\n}\n";
    vec![("nvrtc_filter", "options".into(), format!("{source}\0-DN=4\n--use_fast_math\n-std=c++14\n").into_bytes())]
}

/// `kernel_args` reads its input through `arbitrary`, which has no encoder: bytes from a fixed
/// generator, whose first byte picks each builtin kernel in turn (then a loaded kernel).
fn kernel_args() -> Vec<Seed> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0u8..4)
        .map(|kernel| {
            let mut bytes = vec![kernel];
            bytes.extend((0..95).map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            }));
            ("kernel_args", format!("kernel-{kernel}"), bytes)
        })
        .collect()
}

/// Every generated seed.
pub(crate) fn all() -> Vec<Seed> {
    [
        backend_messages(),
        frame(),
        bulk_header(),
        arm_messages(),
        capability(),
        lane_records(),
        module_image(),
        swf(),
        nvrtc_filter(),
        kernel_args(),
    ]
    .concat()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn generated_seeds_are_what_the_encoders_make() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
        let write = std::env::var_os("AC_FUZZ_WRITE_SEEDS").is_some();
        let mut stale = Vec::new();
        for (target, name, bytes) in super::all() {
            let path = root.join(target).join(format!("gen-{name}"));
            if write {
                std::fs::create_dir_all(path.parent().expect("a directory")).expect("creates");
                std::fs::write(&path, &bytes).expect("writes");
            } else if std::fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
                stale.push(path.display().to_string());
            }
        }
        assert!(stale.is_empty(), "stale seeds (regenerate with AC_FUZZ_WRITE_SEEDS=1): {stale:#?}");
    }
}
