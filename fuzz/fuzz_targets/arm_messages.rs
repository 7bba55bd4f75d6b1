//! Every message of the resource manager's protocol (`ArmRequest` from programs and `armctl`,
//! `ArmResponse` to them), and the records the manager reads back from its store (a file).
//! Asserts: no panic, and `decode(encode(x)) == x` with a stable encoding.
#![no_main]

use ac_fuzz::{decode_exact, decode_stable};
use ac_proto::arm::{ArmRequest, ArmResponse};
use arm_server::model::{DynSet, Host, Job, PendingGet, Reservation, Session};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else { return };
    match which % 9 {
        0 => drop(decode_exact::<ArmRequest>(bytes)),
        1 => drop(decode_exact::<ArmResponse>(bytes)),
        2 => drop(decode_exact::<Host>(bytes)),
        3 => drop(decode_exact::<Job>(bytes)),
        4 => drop(decode_exact::<DynSet>(bytes)),
        5 => drop(decode_exact::<Session>(bytes)),
        6 => drop(decode_exact::<PendingGet>(bytes)),
        7 => drop(decode_exact::<Reservation>(bytes)),
        _ => drop(decode_stable::<arm_sched::Ledger>(bytes)),
    }
});
