//! `include/ac.f90` is written by hand beside the generated `include/ac.h`; these tests keep it
//! from drifting: every function of the header has a binding with the same arguments, every
//! constant the same value, every struct the same fields, every inline argument helper a
//! Fortran twin. (The programs that call them are built and run by `tests/tests/e2e/c_abi.rs`.)

use std::collections::BTreeMap;
use std::path::Path;

fn read(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("include").join(name)).expect(name)
}

/// The header's functions: name -> (return type, parameter types), in order.
fn c_functions(header: &str) -> BTreeMap<String, (String, Vec<String>)> {
    let start = header.find("extern \"C\" {").expect("extern C block") + "extern \"C\" {".len();
    let end = header.find("}  // extern \"C\"").expect("end of the extern C block");
    // Without comments and preprocessor lines, what is left is prototypes, each ending in `;`.
    let code: Vec<&str> =
        header[start..end].lines().map(str::trim).filter(|l| !l.starts_with("//") && !l.starts_with('#')).collect();
    let mut functions = BTreeMap::new();
    for declaration in code.join(" ").split(';') {
        let text = declaration.trim();
        let Some(open) = text.find('(') else { continue };
        let (head, rest) = text.split_at(open);
        let (ret, name) = split_last_word(head.trim());
        let params = rest.trim_start_matches('(').trim_end_matches(')').trim();
        let params = match params {
            "void" | "" => Vec::new(),
            list => list.split(',').map(|p| split_last_word(p.trim()).0).collect(),
        };
        functions.insert(name, (ret, params));
    }
    functions
}

/// `const char *acGetErrorString` -> ("const char *", "acGetErrorString").
fn split_last_word(text: &str) -> (String, String) {
    let at = text.rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
    let ty = text[..at].split_whitespace().collect::<Vec<_>>().join(" ").replace(" *", "*").replace('*', " *");
    (ty.trim().to_string(), text[at..].to_string())
}

/// The Fortran declaration a C parameter type must have.
fn fortran_of(c_type: &str) -> &'static str {
    match c_type {
        "acDevice" | "acKernel" | "acMem" | "acSet" | "acStream" | "void *" | "const void *" => "type(c_ptr), value",
        "acDevice *" | "acKernel *" | "acMem *" | "acSet *" | "acStream *" => "type(c_ptr), intent(out)",
        "int" => "integer(c_int), value",
        "int *" => "integer(c_int), intent(out)",
        "int64_t *" => "integer(c_int64_t), intent(out)",
        "size_t" => "integer(c_size_t), value",
        "uint32_t" => "integer(c_int32_t), value",
        "const char *" => "character(kind=c_char), dimension(*), intent(in)",
        "struct acDim3" => "type(ac_dim3), value",
        "const struct acArg *" => "type(ac_arg), dimension(*), intent(in)",
        "struct acDeviceInfo *" => "type(ac_device_info), intent(out)",
        "struct acCheckResult *" => "type(ac_check_result), intent(out)",
        "struct acTelemetry *" => "type(ac_telemetry), intent(out)",
        other => panic!("no Fortran form for the C type `{other}`: add it to the module and to this test"),
    }
}

/// The Fortran function declaration for a C return type.
fn fortran_return(c_type: &str) -> &'static str {
    match c_type {
        "enum acError" => "integer(c_int)",
        "const char *" => "type(c_ptr)",
        other => panic!("no Fortran form for the C return type `{other}`"),
    }
}

/// Fortran statements with `&` continuations joined and comments dropped.
fn statements(source: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut pending = String::new();
    for line in source.lines() {
        let line = line.split('!').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let continued = line.ends_with('&');
        pending.push_str(line.trim_end_matches('&').trim_start_matches('&'));
        pending.push(' ');
        if !continued {
            out.push(pending.split_whitespace().collect::<Vec<_>>().join(" "));
            pending.clear();
        }
    }
    out
}

/// A Fortran interface being read: its C name, return type, arguments and their declarations.
struct Binding {
    name: String,
    ret: String,
    args: Vec<String>,
    declared: BTreeMap<String, String>,
}

/// The module's `bind(c)` functions: C name -> (Fortran return type, each argument's declaration).
fn fortran_functions(module: &str) -> BTreeMap<String, (String, Vec<String>)> {
    let mut functions = BTreeMap::new();
    let mut current: Option<Binding> = None;
    for statement in statements(module) {
        if let Some(at) = statement.find(" function ").filter(|_| statement.contains("bind(c, name=\"")) {
            let ret = statement[..at].to_string();
            let after = &statement[at + " function ".len()..];
            let args = &after[after.find('(').unwrap() + 1..after.find(')').unwrap()];
            let args = args.split(',').map(str::trim).filter(|a| !a.is_empty()).map(String::from).collect();
            let bound = statement.split("name=\"").nth(1).unwrap();
            let name = bound[..bound.find('"').unwrap()].to_string();
            current = Some(Binding { name, ret, args, declared: BTreeMap::new() });
        } else if statement.starts_with("end function") {
            if let Some(Binding { name, ret, args, declared }) = current.take() {
                let types = args
                    .iter()
                    .map(|a| declared.get(a).cloned().unwrap_or_else(|| panic!("{name}: `{a}` is not declared")))
                    .collect();
                functions.insert(name, (ret, types));
            }
        } else if let Some(binding) = current.as_mut() {
            if let Some((ty, names)) = statement.split_once("::") {
                for n in names.split(',') {
                    binding.declared.insert(n.trim().to_string(), ty.trim().to_string());
                }
            }
        }
    }
    functions
}

#[test]
fn every_function_of_the_header_has_a_fortran_binding_with_the_same_arguments() {
    let c = c_functions(&read("ac.h"));
    let mut fortran = fortran_functions(&read("ac.f90"));
    fortran.remove("strlen"); // the C library's, for ac_string
    assert!(c.contains_key("AC_Init") && c.contains_key("acMemCpyAt"), "the header parsed: {c:?}");
    let mut expected = BTreeMap::new();
    for (name, (ret, params)) in &c {
        // The collectives take a C `MPI_Comm`; Fortran programs call their `_fcomm` twins, which
        // take a Fortran communicator (and are checked as every other function).
        if params.iter().any(|p| p == "MPI_Comm") {
            let twin = name.replace("_comm", "_fcomm");
            assert!(c.contains_key(&twin), "{name} has no Fortran form {twin} in the header");
            continue;
        }
        let params: Vec<String> = params.iter().map(|p| fortran_of(p).to_string()).collect();
        expected.insert(name.clone(), (fortran_return(ret).to_string(), params));
    }
    assert_eq!(
        fortran.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "the Fortran module binds other functions than the header declares"
    );
    for (name, want) in &expected {
        assert_eq!(&fortran[name], want, "{name}: the Fortran binding differs from ac.h");
    }
}

/// `NAME = value` of every enum in the header.
fn c_constants(header: &str) -> BTreeMap<String, i64> {
    let mut constants = BTreeMap::new();
    let mut in_enum = false;
    for line in header.lines().map(str::trim) {
        if line.starts_with("typedef enum") {
            in_enum = true;
        } else if line.starts_with('}') {
            in_enum = false;
        } else if in_enum && !line.starts_with("//") {
            if let Some((name, value)) = line.trim_end_matches(',').split_once(" = ") {
                constants.insert(name.trim().to_string(), value.trim().parse().expect("a number"));
            }
        }
    }
    constants
}

#[test]
fn every_constant_of_the_header_has_the_same_value_in_fortran() {
    let c = c_constants(&read("ac.h"));
    assert!(c.len() > 30, "the header's enums parsed: {c:?}");
    let mut fortran = BTreeMap::new();
    for statement in statements(&read("ac.f90")) {
        if let Some(list) = statement.strip_prefix("integer(c_int), parameter ::") {
            for pair in list.split(',') {
                let (name, value) = pair.split_once('=').expect("NAME = value");
                fortran.insert(name.trim().to_string(), value.trim().parse::<i64>().expect("a number"));
            }
        }
    }
    assert_eq!(fortran, c, "ac.f90's parameters differ from ac.h's enums");
}

/// Each struct's fields as Fortran declares them: `integer(c_int) :: kind`, ...
fn c_structs(header: &str) -> BTreeMap<String, Vec<String>> {
    let mut structs = BTreeMap::new();
    let mut current: Option<(String, Vec<String>)> = None;
    for line in header.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("typedef struct ").filter(|l| l.ends_with('{')) {
            current = Some((rest.trim_end_matches('{').trim().to_string(), Vec::new()));
        } else if line.starts_with('}') {
            if let Some((name, fields)) = current.take() {
                structs.insert(name, fields);
            }
        } else if let Some((_, fields)) = current.as_mut().filter(|_| !line.starts_with("//")) {
            let (ty, name) = line.trim_end_matches(';').rsplit_once(' ').expect("type name");
            let field = match (ty, name.split_once('[')) {
                ("char", Some((name, len))) => format!("character(kind=c_char) :: {name}({}", len.replace(']', ")")),
                ("int", None) => format!("integer(c_int) :: {name}"),
                ("uint32_t" | "int32_t", None) => format!("integer(c_int32_t) :: {name}"),
                ("int32_t", Some((name, len))) => format!("integer(c_int32_t) :: {name}({}", len.replace(']', ")")),
                ("uint64_t" | "int64_t", None) => format!("integer(c_int64_t) :: {name}"),
                ("acSet" | "acDevice", None) => format!("type(c_ptr) :: {name}"),
                (enumeration, None) if enumeration.starts_with("enum ") => format!("integer(c_int) :: {name}"),
                other => panic!("no Fortran form for the field {other:?}"),
            };
            fields.push(field);
        }
    }
    structs
}

#[test]
fn every_struct_of_the_header_has_the_same_fields_in_fortran() {
    let c = c_structs(&read("ac.h"));
    let mut fortran = BTreeMap::new();
    let mut current: Option<(String, Vec<String>)> = None;
    for statement in statements(&read("ac.f90")) {
        if let Some(name) = statement.strip_prefix("type, bind(c) :: ") {
            current = Some((name.to_string(), Vec::new()));
        } else if statement.starts_with("end type") {
            let (name, fields) = current.take().expect("a type");
            fortran.insert(name, fields);
        } else if let Some((_, fields)) = current.as_mut() {
            fields.push(statement);
        }
    }
    // acArg -> ac_arg, acDim3 -> ac_dim3, acDeviceInfo -> ac_device_info, acCheckResult -> ac_check_result,
    // acTelemetry -> ac_telemetry.
    let renamed: BTreeMap<String, Vec<String>> = c.into_iter().map(|(name, fields)| (snake(&name), fields)).collect();
    assert_eq!(renamed.len(), 5, "the header's structs parsed: {renamed:?}");
    assert_eq!(fortran, renamed, "ac.f90's types differ from ac.h's structs");
}

/// `acDeviceInfo` -> `ac_device_info`, `acArgMemAt` -> `ac_arg_mem_at`.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[test]
fn every_argument_helper_of_the_header_has_a_fortran_twin() {
    let header = read("ac.h");
    let module = read("ac.f90").to_lowercase();
    let helpers: Vec<&str> = header
        .lines()
        .filter_map(|l| l.strip_prefix("static inline "))
        .map(|l| {
            let name = l[..l.find('(').unwrap()].rsplit(' ').next().unwrap();
            name
        })
        .collect();
    assert!(helpers.len() >= 9, "the header's helpers parsed: {helpers:?}");
    for helper in helpers {
        // acArgU32 -> ac_u32, acArgMemAt -> ac_mem_at, acDim -> ac_dim.
        let twin = snake(helper).replacen("ac_arg_", "ac_", 1);
        assert!(module.contains(&format!("function {twin}(")), "ac.f90 has no `{twin}` for ac.h's {helper}");
    }
}
