//! Configuration files: the backend's and the manager's TOML (the manager's holds the
//! scheduler's and Slurm's tables), the scheduler's own TOML (also the simulator's), the
//! simulator's configuration with its `[sim]` table, and the scheduler's durations
//! (`"HH:MM:SS"`). Asserts: no panic, and for what parses: written back as TOML it parses
//! again, to the same TOML (the backend's also validates the same way).
#![no_main]

use ac_backend::BackendConfig;
use arm_server::config::ArmConfig;
use libfuzzer_sys::fuzz_target;
use serde::Serialize;

/// `value` written as TOML, parsed by `parse` and written again, gives the same text.
fn stable<T: Serialize, E: std::fmt::Debug>(value: &T, parse: impl Fn(&str) -> Result<T, E>) -> T {
    let once = toml::to_string(value).expect("a parsed configuration writes as TOML");
    let again = parse(&once).unwrap_or_else(|e| panic!("written configuration does not parse: {e:?}\n{once}"));
    assert_eq!(toml::to_string(&again).expect("writes"), once, "TOML not stable");
    again
}

fuzz_target!(|input: &[u8]| {
    let Some((&which, bytes)) = input.split_first() else { return };
    let Ok(text) = std::str::from_utf8(bytes) else { return };
    match which % 5 {
        0 => {
            if let Ok(config) = BackendConfig::from_toml(text) {
                let again = stable(&config, BackendConfig::from_toml);
                assert_eq!(config.validate().is_ok(), again.validate().is_ok());
            }
        }
        1 => {
            if let Ok(config) = ArmConfig::from_toml(text) {
                stable(&config, ArmConfig::from_toml);
            }
        }
        2 => {
            if let Ok(config) = arm_sched::Config::from_toml(text) {
                stable(&config, arm_sched::Config::from_toml);
            }
        }
        3 => drop(arm_sim::experiment::parse_config(text)),
        _ => {
            if let Ok(seconds) = arm_sched::config::Seconds::parse(text) {
                assert_eq!(arm_sched::config::Seconds::parse(&seconds.0.to_string()), Ok(seconds));
            }
        }
    }
});
