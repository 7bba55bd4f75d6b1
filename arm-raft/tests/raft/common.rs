//! What the tests of the replicated store share: a machine like the manager's in miniature.

use std::collections::BTreeMap;

use arm_raft::Machine;

/// A machine like the manager's in miniature: accelerators and their holders. `take A J` gives
/// `A` to `J` if it is free; `free A` frees it.
#[derive(Default, Debug, PartialEq)]
pub struct Pool {
    pub holders: BTreeMap<String, String>,
}

impl Machine for Pool {
    fn apply(&mut self, op: &[u8]) -> Result<Vec<u8>, String> {
        let op = String::from_utf8_lossy(op);
        let words: Vec<&str> = op.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["take", acc, job] if !self.holders.contains_key(*acc) => {
                self.holders.insert(acc.to_string(), job.to_string());
                "granted".to_string()
            }
            ["take", acc, _] => format!("{acc} is held by {}", self.holders[*acc]),
            ["free", acc] => self.holders.remove(*acc).map_or("not held".into(), |_| "freed".into()),
            _ => "malformed".into(),
        };
        Ok(answer.into_bytes())
    }

    fn save(&self) -> Result<Vec<u8>, String> {
        Ok(self.holders.iter().map(|(a, j)| format!("{a}={j}\n")).collect::<String>().into_bytes())
    }

    fn restore(&mut self, bytes: &[u8]) -> Result<(), String> {
        let text = String::from_utf8(bytes.to_vec()).map_err(|e| e.to_string())?;
        let holders = text
            .lines()
            .map(|l| l.split_once('=').map(|(a, j)| (a.to_string(), j.to_string())).ok_or(format!("bad line {l}")))
            .collect::<Result<_, _>>()?;
        self.holders = holders;
        Ok(())
    }
}
