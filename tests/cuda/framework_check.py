"""What tests/cuda/torch_math.py and cupy_math.py share: each operation run on the device through
the CUDA shim, its result copied back and compared with the same operation on the CPU; a line
"NAME ok <relative error>" or "NAME FAILED <why>" each, then "all ok" or "failed: NAMES", and the
exit status 1 if any failed."""
import sys

failures = []


def say(line):
    """`line` written and flushed in one piece: forked children print at once to one pipe."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def check(name, on_device, on_cpu, tolerance, to_host):
    """`on_device()`'s result, copied back by `to_host`, against `on_cpu()`'s: the same shape,
    and max |difference| over max |value| within `tolerance`."""
    try:
        got, want = to_host(on_device()), on_cpu()
        if tuple(got.shape) != tuple(want.shape):
            raise AssertionError(f"shape {tuple(got.shape)}, the CPU's {tuple(want.shape)}")
        error = float(abs(got - want).max() / abs(want).max())
        if not error <= tolerance:
            raise AssertionError(f"relative error {error:.3g} over {tolerance:g}")
        say(f"{name} ok {error:.3g}")
    except Exception as e:  # noqa: BLE001 (every failure is reported by name)
        failures.append(name)
        say(f"{name} FAILED {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def finish():
    print(f"failed: {' '.join(failures)}" if failures else "all ok")
    sys.exit(1 if failures else 0)
