//! One program of the soak (`ac_tests::soak`), a real process that the driver starts, and
//! sometimes kills with `kill -9`.
//!
//! - `ac-soak-client static ROUNDS SEED`: `AC_Init` for a submitted job (`ARM_JOB_ID`,
//!   `ARM_JOB_CREDENTIAL`), then `ROUNDS` rounds of checked work on each static accelerator,
//!   `AC_Finalize`.
//! - `ac-soak-client dynamic ROUNDS SEED`: `AC_Init` for an ad-hoc job (`ARM_ACPN=0`), then
//!   `AC_Get` (1 or 2, waiting up to 5 s), `ROUNDS` rounds on each, `AC_Free`, and again, three
//!   times; `AC_Finalize`.
//!
//! A round uploads `x` and `y`, runs `saxpy` and reads `y` back, checked exactly against the
//! host's `y + 2x`; it alternates between inline (4 KiB) and bulk (1 MiB) copies. The last line
//! is the outcome for the driver: `outcome ok`, `outcome wrong N` (elements that differ) or
//! `outcome error CLASS MESSAGE` ([`ac_tests::soak::error_class`]); `rejected` is printed for
//! each `AC_Get` the manager rejected. `job ID` and `using ID...` (after `AC_Init` and each
//! `AC_Get`) tell the driver which backends the program uses; on an error the program prints
//! `failed` and, its session still open, waits for a line on its standard input, so that the
//! driver can read from the manager what its job holds (a grant it never connected to).

use std::process::ExitCode;
use std::time::Duration;

use ac_frontend::{Accelerator, Error, GetRequest, Handle, LaunchDims, Session, SessionOptions};

/// Elements of a round: inline copies on even rounds, bulk ones on odd rounds.
fn elements(round: u32) -> usize {
    if round.is_multiple_of(2) {
        1_024
    } else {
        256 * 1_024
    }
}

/// One round on `acc`: the number of elements of the result that differ from the host's.
async fn round(acc: &Accelerator, round: u32, seed: u32) -> Result<u64, Error> {
    let n = elements(round);
    let (x, y) = (ac_tests::pattern(n, seed), ac_tests::pattern(n, seed.wrapping_add(7)));
    let (dx, dy) = (acc.alloc_from(&x).await?, acc.alloc_from(&y).await?);
    let saxpy = acc.builtin().await?.function("saxpy").await?;
    saxpy.launch(LaunchDims::linear(n as u64, 256), &[2.0f32.into(), dx.arg(), dy.arg(), (n as u64).into()]).await?;
    let got = dy.to_vec().await?;
    // One buffer freed explicitly, the other by its drop: both paths must give memory back.
    dx.free().await?;
    let wrong = got.iter().zip(x.iter().zip(&y)).filter(|(g, (x, y))| **g != **y + 2.0 * **x).count();
    Ok(wrong as u64 + n.abs_diff(got.len()) as u64)
}

/// `rounds` rounds on each accelerator of `accs`; the wrong elements seen.
async fn work<'a>(accs: impl Iterator<Item = &'a Accelerator> + Clone, rounds: u32, seed: u32) -> Result<u64, Error> {
    let mut wrong = 0;
    for r in 0..rounds {
        for (i, acc) in accs.clone().enumerate() {
            wrong += round(acc, r, seed.wrapping_mul(31).wrapping_add(r * 7 + i as u32)).await?;
        }
        // Programs live a few seconds, so that kills and restarts find them mid-work.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(wrong)
}

/// `using ID...`: the accelerators of `handles`.
fn using(handles: &[Handle]) {
    println!("using {}", handles.iter().map(|h| h.id.as_str()).collect::<Vec<_>>().join(" "));
}

/// Says `failed` and waits for the driver's line (or the end of standard input), the session
/// still open, when `result` is an error.
async fn hold_if_failed<T>(result: Result<T, Error>) -> Result<T, Error> {
    if result.is_err() {
        println!("failed");
        let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new())).await;
    }
    result
}

async fn run_static(rounds: u32, seed: u32) -> Result<u64, Error> {
    let options = SessionOptions::from_env()?;
    // The driver submitted the job: it knows what the manager bound even if AC_Init fails.
    println!("job {}", std::env::var("ARM_JOB_ID").unwrap_or_default());
    let session = hold_if_failed(Session::init(options).await).await?;
    using(session.accelerators());
    let wrong = hold_if_failed(work(session.accelerators().iter().map(|h| &h.acc), rounds, seed).await).await?;
    session.finalize().await?;
    Ok(wrong)
}

async fn run_dynamic(rounds: u32, seed: u32) -> Result<u64, Error> {
    let session = Session::init(SessionOptions::from_env()?).await?;
    println!("job {}", session.job());
    let wrong = hold_if_failed(gets(&session, rounds, seed).await).await?;
    session.finalize().await?;
    Ok(wrong)
}

/// Three `AC_Get`s of 1 or 2 accelerators, each worked on and freed.
async fn gets(session: &Session, rounds: u32, seed: u32) -> Result<u64, Error> {
    let mut wrong = 0;
    for get in 0..3u32 {
        let want = 1 + (seed + get) % 2;
        let request = GetRequest::new(want).at_least(1).wait_up_to(Duration::from_secs(5));
        match session.get_or_why(request).await? {
            Ok(set) => {
                using(&set.handles);
                wrong += work(set.handles.iter().map(|h| &h.acc), rounds, seed.wrapping_add(get)).await?;
                session.free(set).await?;
            }
            Err(_) => println!("rejected"),
        }
    }
    Ok(wrong)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |i: usize| args.get(i).and_then(|a| a.parse::<u32>().ok());
    let (Some(mode), Some(rounds), Some(seed)) = (args.first(), number(1), number(2)) else {
        eprintln!("usage: ac-soak-client static|dynamic ROUNDS SEED");
        return ExitCode::from(64);
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = runtime.block_on(async {
        match mode.as_str() {
            "static" => run_static(rounds, seed).await,
            _ => run_dynamic(rounds, seed).await,
        }
    });
    match result {
        Ok(0) => {
            println!("outcome ok");
            ExitCode::SUCCESS
        }
        Ok(wrong) => {
            println!("outcome wrong {wrong}");
            ExitCode::from(2)
        }
        Err(e) => {
            println!("outcome error {} {e}", ac_tests::soak::error_class(&e));
            ExitCode::from(3)
        }
    }
}
