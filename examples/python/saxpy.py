"""y = a*x + y on the job's first accelerator, with the backend's builtin kernel.

Run it as any job's program: ARM_ADDR and ARM_CA_CERT name the manager; under Slurm
(`sbatch --acpn=1`) the job's credentials come from the environment, and ad hoc
`ARM_ACPN=1 python saxpy.py` makes a job of its own.
"""

import numpy as np

import ac

N = 1 << 20

with ac.init() as session:
    acc = session.accelerators[0]
    print(f"saxpy on {acc.id} ({acc.name})")
    x = acc.to_device(np.arange(N, dtype=np.float32))
    y = acc.to_device(np.ones(N, dtype=np.float32))
    saxpy = acc.builtin().get_function("saxpy")
    saxpy[(N + 255) // 256, 256](np.float32(2.0), x, y, np.uint64(N))  # Numba's form
    result = y.get()  # waits for the launch
    assert (result == 2.0 * np.arange(N, dtype=np.float32) + 1.0).all()
    print(f"saxpy OK: {N} results checked")
