//! SWF workloads (the Standard Workload Format, with the simulator's `AC-EVOLVE`/`AC-ATTR`
//! comments) as `arm-sim` reads them from a file. Asserts: no panic, and what parses, written
//! back as SWF (`to_swf`), parses to the same workload.
#![no_main]

use arm_sim::workload::Workload;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else { return };
    if let Ok(workload) = Workload::parse(text) {
        let written = workload.to_swf("fuzz");
        let again = Workload::parse(&written).unwrap_or_else(|e| panic!("written SWF does not parse: {e}\n{written}"));
        assert_eq!(again, workload);
    }
});
