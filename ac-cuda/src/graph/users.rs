//! User objects (`cuUserObjectCreate`, `cuGraphRetainUserObject`): a program's resource with a
//! destructor, whose references the program and its graphs hold, so that it lives as long as a
//! graph that may still use it (PyTorch keeps the work of collectives captured into a CUDA
//! graph so). Kept here: each object counts its references; a graph holds some (a clone and an
//! executable graph take the same again); when the count reaches zero the destructor runs on a
//! thread of the shim's, one destructor at a time, as CUDA runs them on a shared internal
//! thread (they must not call CUDA).

use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};

use super::{graphs, lock, Kept};
use crate::error::{code, CuResult, Error};
use crate::guard;
use crate::state::{put, Registry};

/// `CUhostFn`: the destructor, called with the object's pointer.
type Destructor = unsafe extern "C" fn(*mut c_void);

/// `CU_USER_OBJECT_NO_DESTRUCTOR_SYNC`, the one flag of an object (and a required one).
const NO_DESTRUCTOR_SYNC: c_uint = 1;
/// `CU_GRAPH_USER_OBJECT_MOVE`: the graph takes the caller's references instead of new ones.
const MOVE: c_uint = 1;

/// A user object: its pointer, destructor, and the references held on it.
#[derive(Debug)]
pub struct UserObject {
    ptr: Kept<*mut c_void>,
    destroy: Kept<Destructor>,
    references: Mutex<u32>,
}

fn objects() -> &'static Registry<UserObject> {
    static OBJECTS: OnceLock<Registry<UserObject>> = OnceLock::new();
    OBJECTS.get_or_init(Registry::default)
}

/// References some holder keeps on user objects: how many of each, by handle.
pub type Held = HashMap<usize, u32>;

/// A count of references the program gives: positive and at most `INT_MAX`, as CUDA's.
fn count_of(count: c_uint) -> CuResult<u32> {
    if count == 0 || count > i32::MAX as c_uint {
        return Err(Error::said(code::INVALID_VALUE, format!("{count} references: 1 to INT_MAX")));
    }
    Ok(count)
}

/// `count` more references on object `handle`.
fn retain(handle: usize, count: u32) -> CuResult<()> {
    let object = objects().get(handle)?;
    let mut references = lock(&object.references);
    *references = references.checked_add(count).ok_or(Error::Code(code::INVALID_VALUE))?;
    Ok(())
}

/// `count` fewer references on object `handle`; the last one gone, the object goes and its
/// destructor runs on a thread of its own.
fn release(handle: usize, count: u32) -> CuResult<()> {
    let object = objects().get(handle)?;
    let mut references = lock(&object.references);
    if *references < count {
        let why = format!("{count} references released of a user object holding {}", *references);
        return Err(Error::said(code::INVALID_VALUE, why));
    }
    *references -= count;
    if *references == 0 {
        drop(references);
        objects().remove(handle)?;
        destructors().send((object.ptr, object.destroy)).map_err(|_| Error::Code(code::UNKNOWN))?;
    }
    Ok(())
}

/// A destructor to run, with its object's pointer.
type Pending = (Kept<*mut c_void>, Kept<Destructor>);

/// The queue of the thread that runs destructors, one at a time, as CUDA's shared internal
/// thread does (started with the first).
fn destructors() -> Sender<Pending> {
    static QUEUE: OnceLock<Mutex<Sender<Pending>>> = OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (send, receive) = channel::<Pending>();
        std::thread::spawn(move || {
            for (ptr, destroy) in receive {
                // SAFETY: the program's destructor with the pointer it gave for it, once, as
                // CUDA calls it.
                unsafe { (destroy.get())(ptr.get()) };
            }
        });
        Mutex::new(send)
    });
    lock(queue).clone()
}

/// Takes the references `held` (a copy of another holder's) anew: a clone's, an executable
/// graph's.
pub fn retain_all(held: &Held) -> Held {
    held.iter().filter(|(&object, &count)| retain(object, count).is_ok()).map(|(&o, &c)| (o, c)).collect()
}

/// Lets go of the references `held` (a graph or executable graph goes).
pub fn release_all(held: &mut Held) {
    for (object, count) in held.drain() {
        let _ = release(object, count);
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuUserObjectCreate(
    out: *mut usize,
    ptr: *mut c_void,
    destroy: Option<Destructor>,
    references: c_uint,
    flags: c_uint,
) -> u32 {
    guard("cuUserObjectCreate", || {
        let destroy = destroy.ok_or_else(|| Error::said(code::INVALID_VALUE, "a user object needs a destructor"))?;
        if flags != NO_DESTRUCTOR_SYNC {
            return Err(Error::said(code::INVALID_VALUE, format!("a user object's flags are {flags}: must be 1")));
        }
        let references = count_of(references)?;
        let object =
            UserObject { ptr: Kept::new(ptr), destroy: Kept::new(destroy), references: Mutex::new(references) };
        put(out, objects().insert(object))
    })
}

#[no_mangle]
pub extern "C" fn cuUserObjectRetain(object: usize, count: c_uint) -> u32 {
    guard("cuUserObjectRetain", || retain(object, count_of(count)?))
}

#[no_mangle]
pub extern "C" fn cuUserObjectRelease(object: usize, count: c_uint) -> u32 {
    guard("cuUserObjectRelease", || release(object, count_of(count)?))
}

#[no_mangle]
pub extern "C" fn cuGraphRetainUserObject(graph: usize, object: usize, count: c_uint, flags: c_uint) -> u32 {
    guard("cuGraphRetainUserObject", || {
        let record = graphs().get(graph)?;
        if flags & !MOVE != 0 {
            return Err(Error::said(code::INVALID_VALUE, format!("flags {flags} (0, or 1 to move the references)")));
        }
        let count = count_of(count)?;
        let mut users = lock(&record.users);
        let held = users.get(&object).copied().unwrap_or(0);
        let now = held.checked_add(count).ok_or(Error::Code(code::INVALID_VALUE))?;
        if flags & MOVE == 0 {
            retain(object, count)?;
        } else {
            objects().get(object)?;
        }
        users.insert(object, now);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn cuGraphReleaseUserObject(graph: usize, object: usize, count: c_uint) -> u32 {
    guard("cuGraphReleaseUserObject", || {
        let record = graphs().get(graph)?;
        let count = count_of(count)?;
        let mut users = lock(&record.users);
        let held = users.get_mut(&object).filter(|held| **held >= count).ok_or_else(|| {
            Error::said(code::INVALID_VALUE, format!("the graph does not hold {count} references to that object"))
        })?;
        *held -= count;
        if *held == 0 {
            users.remove(&object);
        }
        drop(users);
        release(object, count)
    })
}
