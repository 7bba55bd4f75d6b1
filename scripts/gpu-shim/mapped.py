"""Which CUDA libraries this process has mapped, for the GPU check's logs: through the shim, a
framework should map the shim's libcublas/libcublasLt (links to ac-cuda's libcuda.so.1), not
NVIDIA's, which its own library path (an RPATH) can make the loader find first."""

NAMES = ("libcuda.so", "libac_cuda.so", "libcublas.so", "libcublasLt.so", "libcufft.so", "libcudnn.so", "libcudart.so")


def print_mapped():
    """Prints `mapped: PATH` for each distinct CUDA library in /proc/self/maps."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        return
    for path in sorted(paths):
        if any(name in path.rsplit("/", 1)[-1] for name in NAMES):
            print(f"mapped: {path}", flush=True)
