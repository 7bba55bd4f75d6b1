//! Workloads: the Standard Workload Format (SWF) of the Parallel Workloads Archive, with a
//! comment-line extension for evolving jobs and job attributes. Other SWF tools ignore the
//! extension, since it lives in header comments.
//!
//! ```text
//! ; AC-EVOLVE job=<id> at=<s> extra=<units> [retry=<s>]
//! ; AC-JOB job=<id> [type=<name>] [priority=<n>] [exclusive=1]
//! ```
//! `at` and `retry` count seconds of the job's run at its static speed: when it asks for
//! `extra` more units and, if rejected, when it asks once more. A granted job speeds up
//! linearly: its remaining work runs `(size + granted) / size` times faster.

use std::collections::BTreeMap;
use std::fmt::Write;

use arm_sched::Time;

use crate::SimError;

/// How an evolving job grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evolve {
    /// Seconds into its static run when it first asks.
    pub at: Time,
    /// Units it asks for.
    pub extra: u32,
    /// Seconds into its static run when it asks again after a rejection.
    pub retry: Option<Time>,
}

/// One job of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimJob {
    /// SWF job number.
    pub id: u64,
    /// Submission time, seconds.
    pub submit: Time,
    /// Units.
    pub size: u32,
    /// Run time with `size` units.
    pub runtime: Time,
    /// Requested time (the scheduler's walltime).
    pub walltime: Time,
    /// User id.
    pub user: u32,
    /// Group id.
    pub group: u32,
    /// Own priority.
    pub priority: i64,
    /// Nothing overtakes it while it waits.
    pub exclusive: bool,
    /// A label for reports (the ESP job type).
    pub kind: String,
    /// Growth, for evolving jobs.
    pub evolve: Option<Evolve>,
}

/// A workload and the machine size it declares.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Workload {
    /// `; MaxProcs:` from the header, if present.
    pub max_procs: Option<u32>,
    /// Jobs in file order.
    pub jobs: Vec<SimJob>,
}

fn keyed(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace().filter_map(|kv| kv.split_once('=')).collect()
}

fn number<T: std::str::FromStr>(value: Option<&&str>, line: usize, what: &str) -> Result<T, SimError> {
    let value = value.ok_or_else(|| SimError::Workload { line, message: format!("missing {what}=") })?;
    value.parse().map_err(|_| SimError::Workload { line, message: format!("{what}=`{value}` is not a number") })
}

impl Workload {
    /// Parses SWF text.
    pub fn parse(text: &str) -> Result<Self, SimError> {
        let mut workload = Workload::default();
        let mut evolve: BTreeMap<u64, Evolve> = BTreeMap::new();
        let mut attrs: BTreeMap<u64, (String, i64, bool)> = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let trimmed = raw.trim();
            if let Some(comment) = trimmed.strip_prefix(';') {
                let comment = comment.trim();
                if let Some(rest) = comment.strip_prefix("AC-EVOLVE") {
                    let kv = keyed(rest);
                    let retry = kv.get("retry").map(|_| number(kv.get("retry"), line, "retry")).transpose()?;
                    let e = Evolve {
                        at: number(kv.get("at"), line, "at")?,
                        extra: number(kv.get("extra"), line, "extra")?,
                        retry,
                    };
                    evolve.insert(number(kv.get("job"), line, "job")?, e);
                } else if let Some(rest) = comment.strip_prefix("AC-JOB") {
                    let kv = keyed(rest);
                    let priority =
                        kv.get("priority").map(|_| number(kv.get("priority"), line, "priority")).transpose()?;
                    let entry = (
                        kv.get("type").unwrap_or(&"").to_string(),
                        priority.unwrap_or(0),
                        kv.get("exclusive").is_some_and(|v| *v == "1"),
                    );
                    attrs.insert(number(kv.get("job"), line, "job")?, entry);
                } else if let Some(rest) = comment.strip_prefix("MaxProcs:") {
                    workload.max_procs = rest.trim().parse().ok();
                }
                continue;
            }
            if trimmed.is_empty() {
                continue;
            }
            workload.jobs.push(parse_job(trimmed, line)?);
        }
        for job in &mut workload.jobs {
            job.evolve = evolve.remove(&job.id);
            if let Some((kind, priority, exclusive)) = attrs.remove(&job.id) {
                (job.kind, job.priority, job.exclusive) = (kind, priority, exclusive);
            }
        }
        if let Some(id) = evolve.keys().chain(attrs.keys()).next() {
            return Err(SimError::Workload {
                line: 0,
                message: format!("extension names job {id}, which is not in the file"),
            });
        }
        Ok(workload)
    }

    /// Writes SWF text, with the extension lines for what plain SWF cannot say.
    pub fn to_swf(&self, comment: &str) -> String {
        let mut out = String::new();
        for line in comment.lines() {
            let _ = writeln!(out, "; {line}");
        }
        if let Some(p) = self.max_procs {
            let _ = writeln!(out, "; MaxProcs: {p}");
        }
        for j in &self.jobs {
            if !j.kind.is_empty() || j.priority != 0 || j.exclusive {
                let _ = writeln!(
                    out,
                    "; AC-JOB job={} type={} priority={} exclusive={}",
                    j.id,
                    j.kind,
                    j.priority,
                    u8::from(j.exclusive)
                );
            }
            if let Some(e) = j.evolve {
                let retry = e.retry.map(|r| format!(" retry={r}")).unwrap_or_default();
                let _ = writeln!(out, "; AC-EVOLVE job={} at={} extra={}{retry}", j.id, e.at, e.extra);
            }
        }
        for j in &self.jobs {
            let _ = writeln!(
                out,
                "{} {} -1 {} {} -1 -1 {} {} -1 1 {} {} -1 -1 -1 -1 -1",
                j.id, j.submit, j.runtime, j.size, j.size, j.walltime, j.user, j.group
            );
        }
        out
    }
}

/// One SWF data line: the 18 standard fields.
fn parse_job(line_text: &str, line: usize) -> Result<SimJob, SimError> {
    let fields: Vec<i64> = line_text
        .split_whitespace()
        .map(|f| f.parse::<f64>().map(|v| v as i64))
        .collect::<Result<_, _>>()
        .map_err(|_| SimError::Workload { line, message: "a field is not a number".into() })?;
    if fields.len() < 18 {
        return Err(SimError::Workload { line, message: format!("{} fields, SWF has 18", fields.len()) });
    }
    let positive = |v: i64| (v > 0).then_some(v);
    let size = positive(fields[7]).or(positive(fields[4])).ok_or_else(|| SimError::Workload {
        line,
        message: "neither requested (8) nor allocated (5) processors are set".into(),
    })?;
    let runtime = fields[3].max(0) as Time;
    let walltime = positive(fields[8]).map(|w| w as Time).unwrap_or(runtime).max(1);
    Ok(SimJob {
        id: fields[0].max(0) as u64,
        submit: fields[1].max(0) as Time,
        size: size as u32,
        // A job never runs past its walltime: the resource manager ends it there.
        runtime: runtime.min(walltime),
        walltime,
        user: fields[11].max(0) as u32,
        group: fields[12].max(0) as u32,
        priority: 0,
        exclusive: false,
        kind: String::new(),
        evolve: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swf_round_trips_with_the_extension() {
        let text =
            "; MaxProcs: 8\n; AC-EVOLVE job=2 at=10 extra=4 retry=20\n; AC-JOB job=3 type=Z priority=99 exclusive=1\n\
                    1 0 -1 100 2 -1 -1 2 120 -1 1 1 1 -1 -1 -1 -1 -1\n\
                    2 5 -1 60 -1 -1 -1 4 -1 -1 1 2 1 -1 -1 -1 -1 -1\n\
                    3 9 -1 500 8 -1 -1 8 100 -1 1 3 1 -1 -1 -1 -1 -1\n";
        let w = Workload::parse(text).unwrap();
        assert_eq!(w.max_procs, Some(8));
        assert_eq!(w.jobs[0].walltime, 120);
        assert_eq!(w.jobs[1].walltime, 60, "no requested time: the run time");
        assert_eq!(w.jobs[1].evolve, Some(Evolve { at: 10, extra: 4, retry: Some(20) }));
        assert_eq!(w.jobs[2].runtime, 100, "cut at the walltime");
        assert!(w.jobs[2].exclusive && w.jobs[2].priority == 99);
        assert_eq!(Workload::parse(&w.to_swf("again")).unwrap(), w);
    }

    #[test]
    fn malformed_lines_name_their_line() {
        let err = Workload::parse("1 2 3\n").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
        assert!(Workload::parse("; AC-EVOLVE job=9 at=1 extra=1\n").is_err(), "unknown job");
        assert!(Workload::parse("; AC-EVOLVE job=x at=1 extra=1\n").is_err());
    }
}
