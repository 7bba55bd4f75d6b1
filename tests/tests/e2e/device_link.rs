//! Device code linked on the device's driver (backend protocol 21, `Accelerator::link`, the CUDA
//! shim's `cuLinkComplete`), through the SDK: what a CPU device and an older backend refuse,
//! what the SDK refuses before it sends, and the inputs a GPU's driver (the stand-in's) is
//! given checked as module images are. The shim's calls are `cuda_calls.rs`'s.

use crate::device_contract::standin_backend;
use crate::standin;

use ac_tests::TestBackend;

/// Linking device code (protocol 21) needs a GPU's driver: the CPU device refuses it by name,
/// as it does a link of no inputs, and an input whose bytes are not what it announces or a link
/// past the inline limit is refused before it is sent; a backend of protocol 20 is not asked.
/// The session goes on after each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_link_needs_a_gpu_and_inputs_that_are_what_they_say() {
    use ac_proto::backend::{jit_link::MAX_BYTES, LinkInput, LinkInputKind};
    let input = |len: u64| LinkInput { kind: LinkInputKind::Ptx, name: "a.ptx".into(), len, options: Vec::new() };
    let acc = TestBackend::start(64).await.connect().await;
    let refused = acc.link(&[(input(3), b"abc")], &[]).await.expect_err("a CPU device links nothing");
    assert!(refused.to_string().contains("linking device code needs a CUDA device"), "{refused}");
    let none = acc.link(&[], &[]).await.expect_err("no inputs");
    assert!(none.to_string().contains("a link of 0 inputs: it takes 1 to 256"), "{none}");
    let short = acc.link(&[(input(4), b"abc")], &[]).await.expect_err("one byte short");
    assert!(short.to_string().contains("announces 4 bytes and has 3"), "{short}");
    let big = vec![0u8; MAX_BYTES as usize + 1];
    let over = acc.link(&[(input(big.len() as u64), &big)], &[]).await.expect_err("past the limit");
    assert!(over.to_string().contains("at most 67108864 go"), "{over}");
    acc.builtin().await.expect("the session goes on");

    let older = TestBackend::start_with(|c| c.only_protocol = Some(20)).await.connect().await;
    let refused = older.link(&[(input(3), b"abc")], &[]).await.expect_err("protocol 20 links nothing");
    assert!(refused.to_string().contains("needs backend protocol 21"), "{refused}");
    older.builtin().await.expect("the session goes on");
}

/// A GPU's driver links what the SDK sends, but a cubin or fat binary whose headers claim bytes
/// past the input is refused before the driver reads it, as a module's image is, as are a
/// library whose member claims bytes past its end and inputs that are not the kind they are
/// declared as; the link of well-formed PTX goes on in the same session, and the driver saw
/// nothing out of its contract.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standin_links_inputs_checked_as_images_are() {
    use ac_proto::backend::{LinkInput, LinkInputKind};
    let _turn = standin::exclusive().await;
    let acc = standin_backend(64).await.connect().await;
    let input =
        |kind, bytes: &[u8]| LinkInput { kind, name: "input".into(), len: bytes.len() as u64, options: Vec::new() };
    // A 64-bit little-endian ELF header whose section table lies past its 64 bytes.
    let mut cubin = vec![0u8; 64];
    cubin[..6].copy_from_slice(b"\x7fELF\x02\x01");
    cubin[0x28..0x30].copy_from_slice(&4096u64.to_le_bytes());
    cubin[0x3A..0x3C].copy_from_slice(&64u16.to_le_bytes());
    cubin[0x3C..0x3E].copy_from_slice(&3u16.to_le_bytes());
    let refused = acc.link(&[(input(LinkInputKind::Cubin, &cubin), &cubin)], &[]).await.expect_err("a cut cubin");
    assert!(refused.to_string().contains("truncated or malformed cubin"), "{refused}");
    // A fat binary header announcing 4096 bytes after itself, with 16 given.
    let mut fatbin = vec![0u8; 32];
    fatbin[..4].copy_from_slice(&0xBA55_ED50u32.to_le_bytes());
    fatbin[6..8].copy_from_slice(&16u16.to_le_bytes());
    fatbin[8..16].copy_from_slice(&4096u64.to_le_bytes());
    let refused =
        acc.link(&[(input(LinkInputKind::Fatbinary, &fatbin), &fatbin)], &[]).await.expect_err("a cut fatbin");
    assert!(refused.to_string().contains("fatbin declares 16+4096 bytes, 32 received"), "{refused}");
    // An archive whose one member declares 4096 bytes, 4 following its header.
    let mut library = b"!<arch>\n".to_vec();
    library.extend(format!("{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n", "k.o/", 0, 0, 0, 644, 4096).as_bytes());
    library.extend(b"\x7fELF");
    let refused =
        acc.link(&[(input(LinkInputKind::Library, &library), &library)], &[]).await.expect_err("a cut library");
    assert!(refused.to_string().contains("the archive member \"k.o/\" declares 4096 bytes, 4 left"), "{refused}");
    for (kind, bytes, why) in [
        (LinkInputKind::Object, &b".version 8.0"[..], "an Object input that is not an ELF host object"),
        (LinkInputKind::Library, &cubin, "a Library input that is not an ar archive"),
        (LinkInputKind::Ptx, &b"// no directive\0.version 8.0"[..], "a Ptx input with no `.version` directive"),
    ] {
        let refused = acc.link(&[(input(kind, bytes), bytes)], &[]).await.expect_err("not what it says");
        assert!(refused.to_string().contains(why), "{kind:?}: {refused}");
    }
    let ptx = b".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry first()\n{\n\tret;\n}\n";
    let linked = acc.link(&[(input(LinkInputKind::Ptx, ptx), ptx)], &[]).await.expect("the session goes on");
    assert!(String::from_utf8_lossy(&linked.image).contains(".visible .entry first()"));
    standin::assert_no_violations();
}
