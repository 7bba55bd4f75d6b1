//! `__managed__` variables: a module's variables in managed memory. The runtime asks the driver
//! for each one's address (`cuLibraryGetManaged`) and hands it to host code, which reads and
//! writes the variable there, as kernels do on the device.
//!
//! The remote driver places them in the module's memory on the remote GPU, one after another,
//! so one page may hold several (and other variables), and the address is the driver's: nothing
//! can be moved. Each is a [`Region`] as a managed allocation is, kept by the same rule, but
//! over the variable's own bytes (sending whole pages would overwrite its neighbours on the
//! device), with host pages mapped at its address, shared by the variables that lie on them
//! (counted; unmapped with the last, when its image is unloaded). A page the host already uses
//! (a library's) cannot be mapped there: that variable is refused, with its address.
//!
//! A program with several devices: the runtime asks as it registers the program's modules,
//! before any context is current, and the variable the host sees is the first device's.
//! Kernels on another device use that device's own copy (one remote GPU cannot reach another's
//! memory), which the host never sees, unlike a local machine's one variable: such a launch is
//! warned of once (`module::warn_of_managed_variables`).

use std::sync::Arc;

use super::{map_at, page, table, Attached, Region, Table};
use crate::error::{code, CuResult, Error};
use crate::state;

/// Enters `__managed__` variable `address` (`size` bytes) of image `image` on `device`, already
/// a variable in the program's memory: maps host memory at its address, where its bytes are
/// brought now. Asked again, it is left as it is.
pub fn enter(device: usize, image: usize, address: u64, size: u64) -> CuResult<()> {
    let shim = state::shim()?;
    let buffer = {
        let memory = shim.memory.lock().unwrap_or_else(|p| p.into_inner());
        let allocation = memory.get(&(device, address)).ok_or(Error::Code(code::NOT_FOUND))?;
        Arc::clone(&allocation.buffer)
    };
    let mut table = table();
    if table.devices.get(&device).is_some_and(|regions| regions.contains_key(&address)) {
        return Ok(());
    }
    let end = address.checked_add(size).filter(|_| size > 0).ok_or(Error::Code(code::INVALID_VALUE))?;
    let mut before = table.devices.values().filter_map(|regions| regions.range(..end).next_back());
    if before.any(|(&start, region)| start + region.bytes > address) {
        // Another device's: two remote GPUs may give the same addresses.
        return Err(Error::said(
            code::NOT_SUPPORTED,
            format!("managed variable at {address:#x}: other managed memory is the host's at that address"),
        ));
    }
    map_pages(&mut table, address, end)?;
    let mut region = Region {
        bytes: size,
        mapped: size as usize,
        key: address,
        buffer,
        attached: Attached::Global,
        allocated: Attached::Global,
        on_device: true,
        variable_of: Some(image),
    };
    if let Err(e) = region.bring_back(shim, address) {
        unmap_pages(&mut table, address, end);
        return Err(e);
    }
    table.devices.entry(device).or_default().insert(address, region);
    Ok(())
}

/// Image `image` is unloaded: its variables' regions go, and the pages no other variable lies on.
pub fn forget(image: usize) {
    let mut table = table();
    let mut gone = Vec::new();
    for regions in table.devices.values_mut() {
        regions.retain(|&start, region| {
            let kept = region.variable_of != Some(image);
            if !kept {
                gone.push((start, start + region.bytes));
            }
            kept
        });
    }
    for (start, end) in gone {
        unmap_pages(&mut table, start, end);
    }
}

/// The host pages `[start, end)` lies on.
fn pages(start: u64, end: u64) -> impl Iterator<Item = u64> {
    let page = page() as u64;
    (start / page..end.div_ceil(page)).map(move |p| p * page)
}

/// Maps the host pages of `[start, end)` that no variable's mapping holds yet, and counts one
/// more variable on each; all or none.
fn map_pages(table: &mut Table, start: u64, end: u64) -> CuResult<()> {
    for at in pages(start, end) {
        let held = table.variable_pages.get(&at).copied().unwrap_or(0);
        if held == 0 && !map_at(at, page()) {
            release(table, pages(start, end).take_while(|&p| p < at));
            return Err(Error::said(
                code::NOT_SUPPORTED,
                format!("managed variable at {start:#x}: the host uses the page at {at:#x}, where it would be mapped"),
            ));
        }
        table.variable_pages.insert(at, held + 1);
    }
    Ok(())
}

/// Counts one variable fewer on the host pages of `[start, end)`, unmapping those left with none.
fn unmap_pages(table: &mut Table, start: u64, end: u64) {
    release(table, pages(start, end));
}

/// Counts one variable fewer on each of `pages`, unmapping those left with none.
fn release(table: &mut Table, pages: impl Iterator<Item = u64>) {
    for at in pages {
        let Some(held) = table.variable_pages.get_mut(&at) else { continue };
        *held -= 1;
        if *held == 0 {
            table.variable_pages.remove(&at);
            // SAFETY: a page `map_pages` mapped, on which no variable lies any longer.
            unsafe { libc::munmap(at as *mut libc::c_void, page()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::managed::free_range;

    #[test]
    fn variables_on_one_page_share_its_mapping_until_the_last_goes() {
        let page = page() as u64;
        let at = free_range(3 * page as usize);
        let mut table = Table::default();
        // Two small variables on the first page; a third from its end onto the second.
        map_pages(&mut table, at, at + 16).unwrap();
        map_pages(&mut table, at + 16, at + 20).unwrap();
        map_pages(&mut table, at + page - 8, at + page + 8).unwrap();
        assert_eq!(table.variable_pages.get(&at), Some(&3));
        assert_eq!(table.variable_pages.get(&(at + page)), Some(&1));
        unsafe { *((at + 16) as *mut u32) = 7 };
        unmap_pages(&mut table, at, at + 16);
        unmap_pages(&mut table, at + page - 8, at + page + 8);
        assert_eq!(unsafe { *((at + 16) as *const u32) }, 7, "the page another variable lies on stays");
        assert!(!table.variable_pages.contains_key(&(at + page)));
        assert!(map_at(at + page, page as usize), "the second page was unmapped with its last variable");
        unsafe { libc::munmap((at + page) as *mut libc::c_void, page as usize) };
        unmap_pages(&mut table, at + 16, at + 20);
        assert!(table.variable_pages.is_empty());
        assert!(map_at(at, page as usize), "the first page was unmapped with its last variable");
        unsafe { libc::munmap(at as *mut libc::c_void, page as usize) };
    }

    #[test]
    fn a_variable_on_a_page_the_host_uses_is_refused_and_maps_nothing() {
        let page = page() as u64;
        let at = free_range(2 * page as usize);
        // The host's own memory on the second page.
        assert!(map_at(at + page, page as usize));
        let mut table = Table::default();
        let refused = map_pages(&mut table, at + page - 8, at + page + 8).unwrap_err();
        assert!(refused.to_string().contains("the host uses the page"), "{refused}");
        assert!(table.variable_pages.is_empty(), "{:?}", table.variable_pages);
        assert!(map_at(at, page as usize), "the first page, mapped before the refusal, was unmapped");
        unsafe { libc::munmap(at as *mut libc::c_void, 2 * page as usize) };
    }
}
