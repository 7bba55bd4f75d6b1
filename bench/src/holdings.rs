//! Double grants, as the programs of a load run saw their holdings. Also compiled into
//! `tests/smoke.rs` (`#[path]`), where its unit test runs: the bench's binary has no test
//! harness of its own (building the whole bench again for one test).

use std::time::Instant;

/// One grant as its program saw it: from its answer's arrival until the program sent its
/// `AC_Free`. The manager held it at least that long (it grants before it answers, and cannot
/// release before the free reaches it), so two of these on one accelerator that overlap are a
/// double grant in the manager's own view, whatever the delays on the way. The free's answer is
/// no such bound: the manager answers it after it released, and the answer granting the
/// accelerator to another program may arrive first.
#[derive(Debug, Clone)]
pub(crate) struct Holding {
    pub(crate) accelerator: String,
    pub(crate) granted: Instant,
    pub(crate) freeing: Instant,
}

/// The holdings that began while another holding of the same accelerator had not ended.
pub(crate) fn double_grants(mut holdings: Vec<Holding>) -> u64 {
    holdings.sort_by(|a, b| a.accelerator.cmp(&b.accelerator).then(a.granted.cmp(&b.granted)));
    let mut count = 0;
    // The accelerator being swept and the latest end of its holdings so far.
    let mut held: Option<(&str, Instant)> = None;
    for holding in &holdings {
        held = match held {
            Some((accelerator, until)) if accelerator == holding.accelerator => {
                if holding.granted < until {
                    count += 1;
                }
                Some((accelerator, until.max(holding.freeing)))
            }
            _ => Some((&holding.accelerator, holding.freeing)),
        };
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn holding(accelerator: &str, granted_ms: u64, freeing_ms: u64, zero: Instant) -> Holding {
        let at = |ms| zero + Duration::from_millis(ms);
        Holding { accelerator: accelerator.into(), granted: at(granted_ms), freeing: at(freeing_ms) }
    }

    #[test]
    fn a_grant_inside_another_holding_of_its_accelerator_is_a_double_grant() {
        let zero = Instant::now();
        let h = |a, g, f| holding(a, g, f, zero);
        // One after another, touching, and on other accelerators: none.
        assert_eq!(double_grants(vec![h("a/0", 0, 10), h("a/0", 10, 20), h("a/1", 5, 15), h("b/0", 0, 30)]), 0);
        // Granted while held, whatever order the programs reported them in.
        assert_eq!(double_grants(vec![h("a/0", 10, 20), h("a/1", 0, 30), h("a/0", 0, 11)]), 1);
        // Inside a long holding, after a short one that ended: still held by the long one.
        assert_eq!(double_grants(vec![h("a/0", 0, 100), h("a/0", 10, 20), h("a/0", 50, 60)]), 2);
    }
}
