//! A client process for the end-to-end tests.
//!
//! - `ac-test-client share THREADS ROUNDS ELEMENTS`: threads share one handle to the backend at
//!   `AC_BACKEND_ADDR` ([`ac_tests::saxpy_on_shared_handle`]); prints `wrong N`.
//! - `ac-test-client finalize-at-once`: `AC_Init`, `AC_Get(1)`, `AC_Finalize`, and exits the
//!   moment `AC_Finalize` returns (the usual `ARM_*` variables).
//! - `ac-test-client slurm-task [GET [HOLD_S [LINGER_S]]]`: what a task of a Slurm job does:
//!   `AC_Init` (the SPANK plugin's `ARM_*` variables), a kernel on each static accelerator,
//!   prints `node N static K ok`; then `AC_Get(GET)` (prints `got M` or `rejected: WHY`), holds
//!   them `HOLD_S` seconds (prints `holding`), `AC_Free` (prints `freed`), waits `LINGER_S`
//!   seconds, runs a kernel on each static accelerator again (prints `static again ok`),
//!   `AC_Finalize`, prints `done`. With `AC_TEST_WAIT_FOR=PATH` it waits for that file before
//!   `AC_Get`.
//! - `ac-test-client slurm-lend NOTICE_S`: a Slurm task that borrows one accelerator elastically,
//!   prints `lent 1`, gives it back at the first reclaim (prints `freed N`), checks its static
//!   accelerators (prints `static again ok`) and stays until killed.
//! - With `ARM_ADDR` set it opens a session (the usual `ARM_*` variables), takes 2 more
//!   accelerators with `AC_Get`, prints `holding` and waits (killed by the fault tests).
//! - Otherwise it connects to `AC_BACKEND_ADDR`, allocates 128 MiB, prints `copying` and copies
//!   to the device forever (killed by the fault tests).

use ac_frontend::blocking::Accelerator;
use ac_frontend::{Session, SessionOptions};

fn hold_accelerators() -> Result<(), ac_frontend::Error> {
    let rt = tokio::runtime::Runtime::new().map_err(|e| ac_frontend::Error::Setup(e.to_string()))?;
    rt.block_on(async {
        let session = Session::init(SessionOptions::from_env()?).await?;
        let _set = session.get(2).await?.ok_or_else(|| ac_frontend::Error::Setup("AC_Get rejected".into()))?;
        println!("holding");
        std::future::pending::<()>().await;
        Ok(())
    })
}

fn copy_forever() -> Result<(), ac_frontend::Error> {
    let acc = Accelerator::from_env()?;
    let data = vec![7u8; 128 << 20];
    let buf = acc.alloc::<u8>(data.len())?;
    println!("copying");
    loop {
        buf.copy_from_host(&data)?;
    }
}

fn share(args: &[String]) -> Result<(), ac_frontend::Error> {
    let number = |i: usize| -> Result<usize, ac_frontend::Error> {
        args.get(i)
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| ac_frontend::Error::Setup("usage: ac-test-client share THREADS ROUNDS ELEMENTS".into()))
    };
    let (threads, rounds, elements) = (number(0)?, number(1)?, number(2)?);
    let acc = Accelerator::from_env()?;
    let start = std::time::Instant::now();
    let wrong = ac_tests::saxpy_on_shared_handle(&acc, threads, rounds, elements)?;
    println!(
        "wrong {wrong} threads {threads} rounds {rounds} elements {elements} seconds {:.1}",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn finalize_at_once() -> Result<(), ac_frontend::Error> {
    let rt = tokio::runtime::Runtime::new().map_err(|e| ac_frontend::Error::Setup(e.to_string()))?;
    rt.block_on(async {
        let session = Session::init(SessionOptions::from_env()?).await?;
        let _set = session.get(1).await?.ok_or_else(|| ac_frontend::Error::Setup("AC_Get rejected".into()))?;
        session.finalize().await
    })?;
    std::process::exit(0)
}

/// `slurm-lend NOTICE_S`: a batch task that borrows one accelerator elastically (NOTICE_S of
/// notice), prints `lent`, computes on it until a reclaim arrives, gives it back and prints
/// `freed N`, then computes on its static accelerators and prints `static again ok`; it stays
/// until killed, so that its job keeps running.
fn slurm_lend(args: &[String]) -> Result<(), ac_frontend::Error> {
    use std::io::Write;
    let notice: u64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(5);
    let rt = tokio::runtime::Runtime::new().map_err(|e| ac_frontend::Error::Setup(e.to_string()))?;
    rt.block_on(async {
        let session = Session::init(SessionOptions::from_env()?).await?;
        let mut reclaims = session.preemptions();
        let request = ac_frontend::GetRequest::new(1).elastic(std::time::Duration::from_secs(notice));
        let mut set =
            session.get_with(request).await?.ok_or_else(|| ac_frontend::Error::Setup("nothing lent".into()))?;
        ac_tests::computes(&set.handles[0].acc).await?;
        println!("lent {}", set.handles.len());
        std::io::stdout().flush().ok();
        let reclaim = reclaims.recv().await.ok_or_else(|| ac_frontend::Error::Setup("no reclaim".into()))?;
        let ids: Vec<&str> = reclaim.accelerators.iter().map(String::as_str).collect();
        session.free_some(&mut set, &ids).await?;
        println!("freed {}", ids.len());
        for handle in session.accelerators() {
            ac_tests::computes(&handle.acc).await?;
        }
        println!("static again ok");
        std::io::stdout().flush().ok();
        std::future::pending::<()>().await;
        Ok(())
    })
}

fn slurm_task(args: &[String]) -> Result<(), ac_frontend::Error> {
    use std::io::Write;
    let get: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(0);
    let hold: f64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(0.0);
    let linger: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(0.0);
    let rt = tokio::runtime::Runtime::new().map_err(|e| ac_frontend::Error::Setup(e.to_string()))?;
    rt.block_on(async {
        let session = Session::init(SessionOptions::from_env()?).await?;
        for handle in session.accelerators() {
            ac_tests::computes(&handle.acc).await?;
        }
        println!("node {} static {} ok", session.node(), session.accelerators().len());
        if let Some(path) = std::env::var_os("AC_TEST_WAIT_FOR") {
            println!("waiting");
            std::io::stdout().flush().ok();
            while !std::path::Path::new(&path).exists() {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        if get > 0 {
            match session.get_or_why(ac_frontend::GetRequest::new(get)).await? {
                Ok(set) => {
                    for handle in &set.handles {
                        ac_tests::computes(&handle.acc).await?;
                    }
                    println!("got {}", set.handles.len());
                    println!("holding");
                    std::io::stdout().flush().ok();
                    tokio::time::sleep(std::time::Duration::from_secs_f64(hold)).await;
                    session.free(set).await?;
                    println!("freed");
                }
                Err(why) => println!("rejected: {why}"),
            }
            std::io::stdout().flush().ok();
            tokio::time::sleep(std::time::Duration::from_secs_f64(linger)).await;
            for handle in session.accelerators() {
                ac_tests::computes(&handle.acc).await?;
            }
            println!("static again ok");
        }
        session.finalize().await?;
        println!("done");
        Ok(())
    })
}

fn main() -> Result<(), ac_frontend::Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("slurm-task") {
        slurm_task(&args[1..])
    } else if args.first().map(String::as_str) == Some("slurm-lend") {
        slurm_lend(&args[1..])
    } else if args.first().map(String::as_str) == Some("finalize-at-once") {
        finalize_at_once()
    } else if args.first().map(String::as_str) == Some("share") {
        share(&args[1..])
    } else if std::env::var_os("ARM_ADDR").is_some() {
        hold_accelerators()
    } else {
        copy_forever()
    }
}
