//! The builtin kernels' signatures are documented where C and Fortran programmers look: in
//! `ac.h` (at `AC_SOURCE_BUILTIN`) and in the README. Both lists must say what the backend's
//! table (`ac_backend::device::builtin::KERNELS`) says, kernel for kernel, argument for argument;
//! and the CPU device's builtin module lists them so (backend protocol 20).

use std::path::Path;

use ac_backend::device::builtin::KERNELS;
use ac_frontend::ParamKind;

fn read(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace");
    std::fs::read_to_string(root.join(path)).expect(path)
}

/// The kernels a documentation list names, each with its parameters' kinds, in its order. An
/// entry is a line `- \`name(type arg, ...)\`: ...` (in `ac.h` behind the comment's `//`).
fn documented(list: &str) -> Vec<(String, Vec<ParamKind>)> {
    list.lines()
        .filter_map(|line| line.trim_start_matches(['/', ' ']).strip_prefix("- `"))
        .map(|entry| {
            let (name, rest) = entry.split_once('(').expect("name(");
            let params = &rest[..rest.find(")`").expect(")`")];
            let kinds = params.split(',').map(|p| kind(p.trim()).unwrap_or_else(|| panic!("{name}: `{p}`"))).collect();
            (name.to_string(), kinds)
        })
        .collect()
}

/// The kind of a documented parameter (`const float *x`, `uint32_t m`).
fn kind(param: &str) -> Option<ParamKind> {
    if param.contains('*') {
        return Some(ParamKind::Ptr);
    }
    Some(match param.split_whitespace().next()? {
        "float" => ParamKind::F32,
        "double" => ParamKind::F64,
        "int32_t" => ParamKind::I32,
        "uint32_t" => ParamKind::U32,
        "int64_t" => ParamKind::I64,
        "uint64_t" => ParamKind::U64,
        _ => return None,
    })
}

fn table() -> Vec<(String, Vec<ParamKind>)> {
    KERNELS.iter().map(|(name, params)| (name.to_string(), params.to_vec())).collect()
}

/// The text between `from` and `to` in `text`.
fn between<'a>(text: &'a str, from: &str, to: &str) -> &'a str {
    let start = text.find(from).unwrap_or_else(|| panic!("`{from}` not found"));
    let end = start + text[start..].find(to).unwrap_or_else(|| panic!("`{to}` not found after `{from}`"));
    &text[start..end]
}

#[test]
fn the_header_documents_every_builtin_kernel_as_the_backend_defines_it() {
    let header = read("ac-capi/include/ac.h");
    let list = between(&header, "The device's builtin module", "AC_SOURCE_BUILTIN = 0");
    assert_eq!(documented(list), table(), "ac.h's list of builtin kernels differs from the backend's table");
}

#[test]
fn the_readme_documents_every_builtin_kernel_as_the_backend_defines_it() {
    let readme = read("README.md");
    let list = between(&readme, "### Builtin kernels", "\n## ");
    assert_eq!(documented(list), table(), "the README's list of builtin kernels differs from the backend's table");
}

/// The CPU device's module lists the builtin kernels, the table's names in its order, each
/// found by its name (protocol 20); a backend of protocol 19 is not asked: the SDK refuses by
/// name, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cpu_devices_module_lists_the_builtins_and_an_older_backend_is_not_asked() {
    let acc = ac_tests::TestBackend::start(64).await.connect().await;
    let module = acc.builtin().await.unwrap();
    let names = module.kernel_names().await.unwrap();
    let table: Vec<&str> = KERNELS.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, table);
    for name in &names {
        module.function(name).await.unwrap_or_else(|e| panic!("{name}, listed, is not found: {e}"));
    }

    let older = ac_tests::TestBackend::start_with(|c| c.only_protocol = Some(19)).await.connect().await;
    let module = older.builtin().await.unwrap();
    let refused = module.kernel_names().await.expect_err("protocol 19 lists nothing");
    assert!(refused.to_string().contains("needs backend protocol 20"), "{refused}");
    module.function("fill").await.expect("the session goes on");
}
