"""check_io wall time on the bench MLP (same artefact as benches/tract_check.rs)."""
import io, tarfile, tempfile, time
from pathlib import Path
import numpy as np
from fastnnef.check import check_io, TractArtefact

W, B, L = 512, 64, 8

def dat(a):
    h = bytearray(128); h[0:4] = b"\x4e\xef\x01\x00"
    h[4:8] = (a.nbytes).to_bytes(4, "little"); h[8:12] = a.ndim.to_bytes(4, "little")
    for i, d in enumerate(a.shape): h[12+4*i:16+4*i] = d.to_bytes(4, "little")
    h[0x2C:0x30] = (32).to_bytes(4, "little")
    return bytes(h) + a.astype("<f4").tobytes()

g = ["version 1.0;", "extension tract_registry tract_core;", "graph network(x) -> (y) {",
     f"  x = tract_core_external(shape = [{B}, {W}], datum_type = 'f32');"]
members = {}
prev = "x"
i = np.arange(W*W)
for l in range(L):
    members[f"w{l}.dat"] = dat(((((i*7919 + l*31) % 1000) - 500.0) * 1e-5).astype(np.float32).reshape(W, W))
    members[f"b{l}.dat"] = dat(((np.arange(W) % 17) * 1e-3).astype(np.float32).reshape(1, W))
    out = "y" if l == L-1 else f"h{l}"
    g += [f"  w{l} = variable<scalar>(label = 'w{l}', shape = [{W}, {W}]);",
          f"  b{l} = variable<scalar>(label = 'b{l}', shape = [1, {W}]);",
          f"  m{l} = matmul({prev}, w{l});", f"  a{l} = add(m{l}, b{l});", f"  {out} = relu(a{l});"]
    prev = out
g.append("}")
tmp = Path(tempfile.mkdtemp()); path = tmp / "mlp.nnef.tar"
with tarfile.open(path, "w") as t:
    for name, data in [("graph.nnef", ("\n".join(g)+"\n").encode()), *members.items()]:
        info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
x = ((np.arange(B*W) % 101 - 50.0) * 1e-2).astype(np.float32).reshape(B, W)
(y,) = TractArtefact.load(path).run([x])
def best(f, n=20):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    return np.median(ts), min(ts)
print("check_io median/min s: %.4f %.4f" % best(lambda: check_io(path, [x], [y], ["x"], ["y"])))
print("TractArtefact.load+run median/min s: %.4f %.4f" % best(lambda: TractArtefact.load(path).run([x])))
