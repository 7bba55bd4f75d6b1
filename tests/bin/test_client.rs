//! A client process for the fault tests, killed in the middle of its work.
//!
//! With `ARM_ADDR` set it opens a session (the usual `ARM_*` variables), takes 2 more
//! accelerators with `AC_Get`, prints `holding` and waits. Otherwise it connects to
//! `AC_BACKEND_ADDR`, allocates 128 MiB, prints `copying` and copies to the device forever.

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

fn main() -> Result<(), ac_frontend::Error> {
    if std::env::var_os("ARM_ADDR").is_some() {
        hold_accelerators()
    } else {
        copy_forever()
    }
}
