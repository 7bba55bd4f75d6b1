//! CUDA arrays and texture and surface objects of a session (protocol 16; `cuArray3DCreate`,
//! `cuTexObjectCreate`, `cuSurfObjectCreate`). An array counts against the session's quota
//! from its creation until it goes. An object holds what it reads (an array, or the allocation
//! its linear memory lies in), so that a program that destroys an array or frees a buffer
//! before the texture over it leaves no object reading memory the session no longer holds: the
//! memory goes with the object's last reference, as CUDA leaves that order undefined.

use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ac_proto::backend::{ArrayId, ArraySpec, ErrorKind, Sampler, TextureResource, WireError};
use rustc_hash::FxHashMap;

use super::{Allocation, Session};
use crate::device::Context;

/// The most arrays, and the most texture and surface objects, a session holds at once: an
/// array is charged its packed size, which the GPU's layout may pad, so many small ones must
/// not pass the quota unseen.
pub const MOST_HELD: usize = 1 << 16;

/// A CUDA array of a session: destroyed when its last reference (the session's table, an
/// object over it, a queued copy) goes.
#[derive(Debug)]
pub struct DeviceArray {
    /// The device's handle.
    pub handle: u64,
    /// Its shape.
    pub spec: ArraySpec,
    context: Arc<dyn Context>,
    held: Arc<AtomicU64>,
}

impl Drop for DeviceArray {
    fn drop(&mut self) {
        self.context.destroy_array(self.handle);
        // What `Session::create_array` charged: its packed size, which a misshapen spec never has.
        self.held.fetch_sub(self.spec.bytes().unwrap_or(0), Ordering::AcqRel);
    }
}

/// What an object reads, held while it lives.
#[derive(Debug)]
enum Reads {
    Array(#[allow(dead_code)] Arc<DeviceArray>),
    Memory(#[allow(dead_code)] Arc<Allocation>),
}

/// A texture or surface object of a session.
#[derive(Debug)]
struct DeviceObject {
    value: u64,
    surface: bool,
    context: Arc<dyn Context>,
    /// Held, not read: the object keeps what it reads alive.
    _reads: Reads,
}

impl Drop for DeviceObject {
    fn drop(&mut self) {
        self.context.destroy_object(self.value, self.surface);
    }
}

/// A session's arrays and objects.
#[derive(Debug, Default)]
pub struct Table {
    arrays: Mutex<FxHashMap<ArrayId, Arc<DeviceArray>>>,
    /// By (value, whether a surface): a texture and a surface may share a value.
    objects: Mutex<FxHashMap<(u64, bool), DeviceObject>>,
    next: AtomicU64,
}

impl Table {
    /// Lets every object and array go (the session ends).
    pub(super) fn clear(&self) {
        // Dropped outside the locks: a session worker's destruction is a write to its pipe.
        let objects = std::mem::take(&mut *self.objects.lock().unwrap_or_else(|p| p.into_inner()));
        drop(objects);
        let arrays = std::mem::take(&mut *self.arrays.lock().unwrap_or_else(|p| p.into_inner()));
        drop(arrays);
    }
}

impl Session {
    /// Creates a zeroed array of `spec`'s shape.
    pub fn create_array(&self, spec: ArraySpec) -> Result<ArrayId, WireError> {
        if let Some(why) = spec.misshapen() {
            return Err(WireError::new(ErrorKind::InvalidArgument, why));
        }
        let size = spec.bytes().ok_or_else(|| WireError::new(ErrorKind::InvalidArgument, format!("{spec:?}")))?;
        if self.arrays.arrays.lock().unwrap_or_else(|p| p.into_inner()).len() >= MOST_HELD {
            return Err(too_many("arrays"));
        }
        self.charge(size)?;
        let handle = self.context.create_array(&spec).inspect_err(|_| {
            self.held.fetch_sub(size, Ordering::AcqRel);
        })?;
        let array = DeviceArray { handle, spec, context: self.context.clone(), held: self.held.clone() };
        let id = ArrayId(self.arrays.next.fetch_add(1, Ordering::Relaxed) + 1);
        self.arrays.arrays.lock().unwrap_or_else(|p| p.into_inner()).insert(id, Arc::new(array));
        Ok(id)
    }

    /// Lets array `id` go: it goes once nothing holds it.
    pub fn destroy_array(&self, id: ArrayId) -> Result<(), WireError> {
        let gone = self.arrays.arrays.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        gone.map(drop).ok_or_else(|| unknown_array(id))
    }

    /// Array `id` of this session.
    pub fn array(&self, id: ArrayId) -> Result<Arc<DeviceArray>, WireError> {
        self.arrays.arrays.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned().ok_or_else(|| unknown_array(id))
    }

    /// Creates a texture object over `resource` read as `sampler` says, or with no sampler a
    /// surface object over an array: the device's value.
    pub fn create_object(&self, resource: TextureResource, sampler: Option<Sampler>) -> Result<u64, WireError> {
        let (reads, resolved) = match resource.linear_span() {
            None => {
                let TextureResource::Array(id) = resource else { unreachable!("only an array spans no memory") };
                let array = self.array(id)?;
                let handle = array.handle;
                (Reads::Array(array), resource.over(|_| handle, |_| 0))
            }
            Some((address, span)) => {
                let span = span.ok_or_else(|| {
                    WireError::new(ErrorKind::InvalidArgument, format!("a texture over {resource:?} spans no memory"))
                })?;
                let alloc = self.resolve(address, span)?;
                let at = alloc.mem.0 + address.offset;
                (Reads::Memory(alloc), resource.over(|_| 0, |_| at))
            }
        };
        if self.arrays.objects.lock().unwrap_or_else(|p| p.into_inner()).len() >= MOST_HELD {
            return Err(too_many("texture and surface objects"));
        }
        let value = self.context.create_object(&resolved, sampler.as_ref())?;
        let surface = sampler.is_none();
        let mut objects = self.arrays.objects.lock().unwrap_or_else(|p| p.into_inner());
        match objects.entry((value, surface)) {
            Entry::Vacant(entry) => {
                entry.insert(DeviceObject { value, surface, context: self.context.clone(), _reads: reads });
                Ok(value)
            }
            // A driver that hands out a live value again: the object of that value already
            // kept stays, and is destroyed once, when it goes.
            Entry::Occupied(_) => {
                let why = format!("the device answered object {value:#x}, which the session holds already");
                Err(WireError::new(ErrorKind::Device, why))
            }
        }
    }

    /// Destroys texture (or with `surface`, surface) object `value` of this session.
    pub fn destroy_object(&self, value: u64, surface: bool) -> Result<(), WireError> {
        let gone = self.arrays.objects.lock().unwrap_or_else(|p| p.into_inner()).remove(&(value, surface));
        let kind = if surface { "surface" } else { "texture" };
        gone.map(drop).ok_or_else(|| {
            WireError::new(ErrorKind::InvalidArgument, format!("no {kind} object {value:#x} in this session"))
        })
    }
}

fn too_many(what: &str) -> WireError {
    WireError::new(ErrorKind::OutOfMemory, format!("a session holds at most {MOST_HELD} {what} at once"))
}

fn unknown_array(id: ArrayId) -> WireError {
    WireError::new(ErrorKind::InvalidArgument, format!("no array {} in this session", id.0))
}
