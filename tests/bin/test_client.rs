//! A client for the fault tests: connects (AC_BACKEND_ADDR, AC_CA_CERT), allocates 128 MiB and
//! copies it to the device forever, so that a test can kill it in the middle of a transfer.

use ac_frontend::blocking::Accelerator;

fn main() -> Result<(), ac_frontend::Error> {
    let acc = Accelerator::from_env()?;
    let data = vec![7u8; 128 << 20];
    let buf = acc.alloc::<u8>(data.len())?;
    println!("copying");
    loop {
        buf.copy_from_host(&data)?;
    }
}
