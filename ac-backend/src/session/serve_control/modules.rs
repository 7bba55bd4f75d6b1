//! Modules and launches on the control stream: loading (from the image cache or the payload),
//! unloading, looking up a function or a variable, and checking and queuing a launch.

use std::sync::Arc;

use ac_proto::backend::{
    BufferId, ErrorKind, FunctionId, KernelArg, KernelSetting, LaunchDims, ModuleId, ModuleSource, Response, StreamId,
    WireError,
};

use super::{blocking, error, no_stream, Control};
use crate::device::stream_workers::StreamOp;
use crate::device::{check_cluster, check_signature, validate_dims, DeviceArg, Kernel, LaunchMode};

impl Control {
    pub(super) async fn load_module(&mut self, source: ModuleSource, image: bytes::Bytes) -> Response {
        let device = self.session.context.clone();
        let (images, owner) = (self.session.images.clone(), self.session.image_owner());
        // Compiling (NVRTC, large images) and hashing may take long: off the async threads.
        let loaded = tokio::task::spawn_blocking(move || {
            let module = device.load_module(&source, &image)?;
            // What loaded is kept by content, for this owner's next processes.
            if matches!(source, ModuleSource::Ptx | ModuleSource::Cubin) {
                images.put(owner, ac_proto::backend::image_digest(&image), image);
            }
            Ok(module)
        })
        .await;
        match loaded {
            Ok(Ok(module)) => {
                let id = ModuleId(self.fresh_id());
                self.modules.insert(id, module);
                Response::Module(id)
            }
            Ok(Err(e)) => Response::Error(e),
            Err(e) => error(ErrorKind::Internal, format!("module load panicked: {e}")),
        }
    }

    pub(super) async fn unload_module(&mut self, module: ModuleId) -> Response {
        let Some(device_module) = self.modules.remove(&module) else {
            return error(ErrorKind::InvalidModule, format!("module {} does not exist in this session", module.0));
        };
        self.drain_streams().await;
        // Its functions die with it, here and in the context: a later launch is an error, never
        // a dead handle handed to the device.
        let dead: Vec<FunctionId> = self.kernels.iter().filter(|(_, (m, _))| *m == module).map(|(f, _)| *f).collect();
        for function in dead {
            self.kernels.remove(&function);
            self.unloaded.insert(function, module);
        }
        // And its variables' buffers: a copy to one after this is an unknown buffer.
        let variables: Vec<BufferId> =
            self.variables.iter().filter(|((m, _), _)| *m == module).map(|(_, (buffer, ..))| *buffer).collect();
        self.variables.retain(|(m, _), _| *m != module);
        self.session.forget_variables(&variables);
        self.session.context.unload_module(device_module);
        Response::Ok
    }

    pub(super) fn lookup(&mut self, module: ModuleId, name: &str) -> Response {
        let Some(&device_module) = self.modules.get(&module) else {
            return error(ErrorKind::InvalidModule, format!("module {} does not exist in this session", module.0));
        };
        match self.session.context.kernel(device_module, name) {
            Ok(kernel) => {
                let id = FunctionId(self.fresh_id());
                let params = kernel.params.clone();
                self.kernels.insert(id, (module, Arc::new(kernel)));
                Response::Function { id, params }
            }
            Err(e) => Response::Error(e),
        }
    }

    /// The names of the kernels `module` holds.
    pub(super) fn kernel_names(&self, module: ModuleId) -> Response {
        let Some(&device_module) = self.modules.get(&module) else {
            return error(ErrorKind::InvalidModule, format!("module {} does not exist in this session", module.0));
        };
        self.session.context.kernel_names(device_module).map_or_else(Response::Error, Response::KernelNames)
    }

    /// A buffer over `module`'s variable `name`: the same one for every lookup of it.
    pub(super) fn variable(&mut self, module: ModuleId, name: String) -> Response {
        let Some(&device_module) = self.modules.get(&module) else {
            return error(ErrorKind::InvalidModule, format!("module {} does not exist in this session", module.0));
        };
        let key = (module, name);
        if let Some(&(buffer, address, size)) = self.variables.get(&key) {
            return Response::Global { buffer, address, size };
        }
        match self.session.context.global(device_module, &key.1) {
            Ok((mem, size)) => {
                let buffer = self.session.adopt_variable(mem, size);
                self.variables.insert(key, (buffer, mem.0, size));
                Response::Global { buffer, address: mem.0, size }
            }
            Err(e) => Response::Error(e),
        }
    }

    /// The kernel `function` names, or why there is none.
    fn kernel_of(&self, function: FunctionId) -> Result<Arc<Kernel>, WireError> {
        self.kernels.get(&function).map(|(_, k)| k.clone()).ok_or_else(|| {
            let message = match self.unloaded.get(&function) {
                Some(module) => format!("function {} belongs to module {}, which was unloaded", function.0, module.0),
                None => format!("function {} does not exist in this session", function.0),
            };
            WireError::new(ErrorKind::InvalidFunction, message)
        })
    }

    /// What the device says of a kernel.
    pub(super) fn kernel_attributes(&self, function: FunctionId) -> Response {
        match self.kernel_of(function).and_then(|kernel| self.session.context.kernel_attributes(&kernel)) {
            Ok(attributes) => Response::KernelAttributes(attributes),
            Err(e) => Response::Error(e),
        }
    }

    /// Sets one of a kernel's attributes. A lower dynamic shared memory limit, and non-portable
    /// cluster sizes disallowed, wait for the work queued before, so that a launch queued under
    /// the old setting is checked against it, as CUDA checks a launch when it is made; nothing
    /// else waits (CUDA's setting does not).
    pub(super) async fn set_kernel_attribute(&mut self, function: FunctionId, setting: KernelSetting) -> Response {
        let kernel = match self.kernel_of(function) {
            Ok(kernel) => kernel,
            Err(e) => return Response::Error(e),
        };
        match setting {
            KernelSetting::MaxDynamicShared(bytes) => {
                let current = self.session.context.kernel_attributes(&kernel).map(|a| a.max_dynamic_shared);
                if current.map_or(true, |limit| bytes < limit) {
                    self.drain_streams().await;
                }
            }
            KernelSetting::NonPortableClusterSizeAllowed(false) => self.drain_streams().await,
            KernelSetting::NonPortableClusterSizeAllowed(true) | KernelSetting::PreferredCarveout(_) => {}
        }
        match self.session.context.set_kernel_attribute(&kernel, setting) {
            Ok(()) => Response::Ok,
            Err(e) => Response::Error(e),
        }
    }

    pub(super) async fn enqueue_launch(
        &mut self,
        function: FunctionId,
        dims: LaunchDims,
        args: &[KernelArg],
        stream: StreamId,
        mode: LaunchMode,
    ) -> Response {
        match self.prepare_launch(function, dims, args, stream, mode) {
            Ok(op) => {
                self.session.metrics.launched();
                self.enqueue_on(stream, op).await
            }
            Err(e) => Response::Error(e),
        }
    }

    /// Checks a launch completely before it is queued: kernel, signature, shape, buffers.
    pub(super) fn prepare_launch(
        &self,
        function: FunctionId,
        dims: LaunchDims,
        args: &[KernelArg],
        stream: StreamId,
        mode: LaunchMode,
    ) -> Result<StreamOp, WireError> {
        let kernel = self.kernel_of(function)?;
        check_signature(&kernel, args)?;
        validate_dims(&dims)?;
        if let LaunchMode::Clustered(cluster) = mode {
            check_cluster(&dims, cluster)?;
        }
        if !self.streams.contains_key(&stream) {
            return Err(no_stream(stream));
        }
        let mut hold = Vec::new();
        let mut device_args = Vec::with_capacity(args.len());
        for arg in args {
            device_args.push(match arg {
                KernelArg::Ptr(ptr) => {
                    let alloc = self.session.resolve_pointer(*ptr)?;
                    let arg = DeviceArg::Mem { mem: alloc.mem, offset: ptr.offset, len: alloc.size - ptr.offset };
                    hold.push(alloc);
                    arg
                }
                scalar => DeviceArg::Scalar(*scalar),
            });
        }
        Ok(StreamOp::Launch { kernel, dims, args: device_args, mode, _hold: hold })
    }

    /// Clusters of `cluster` blocks of the kernel the device holds at once, after the work
    /// queued before (the driver's answer depends on nothing queued, but a query is a call).
    pub(super) async fn max_active_clusters(
        &mut self,
        function: FunctionId,
        dims: LaunchDims,
        cluster: [u32; 3],
    ) -> Response {
        let checked = self.kernel_of(function).and_then(|kernel| {
            validate_dims(&dims)?;
            check_cluster(&LaunchDims { grid: cluster, ..dims }, cluster)?;
            Ok(kernel)
        });
        let kernel = match checked {
            Ok(kernel) => kernel,
            Err(e) => return Response::Error(e),
        };
        let context = self.session.context.clone();
        match blocking(move || context.max_active_clusters(&kernel, &dims, cluster)).await {
            Ok(count) => Response::Clusters(count),
            Err(e) => Response::Error(e),
        }
    }
}
