"""mxrl.quantize / dequantize / the FP8 grids: bit for bit the CLI's kernels, zero-copy, clear errors."""

import numpy as np
import pytest

import mxrl
import st

ELEMS = ["e4m3", "e5m2", "e3m2", "e2m3", "e2m1"]
CODE_DTYPE = {"e4m3": "F8_E4M3", "e5m2": "F8_E5M2"}


def sample(shape, seed):
    """Values over many binades, with zeros, signed zeros, exact ties, huge and tiny values."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-20, 20, shape))).astype(np.float32)
    flat = x.reshape(-1)
    flat[::17] = 0.0
    flat[5::29] = -0.0
    flat[7::31] = 3.0e38
    flat[9::37] = 1.0e-40  # FP32 subnormal
    return x


@pytest.fixture(scope="module")
def cli_quantized(cli, tmp_path_factory):
    """One input file through `mxrl quantize` for every element type, both rules, both axes and SR."""
    d = tmp_path_factory.mktemp("quant")
    tensors = {"a": sample((4, 96), 1), "b": sample((3, 2, 64), 2), "c": sample((64, 5), 3)}
    f16 = sample((2, 32), 4).clip(-6e4, 6e4).astype(np.float16)
    inp = d / "in.safetensors"
    st.write(inp, {"a": ("F32", tensors["a"]), "b": ("F32", tensors["b"]), "h": ("F16", f16)})
    inc = d / "in_col.safetensors"
    st.write(inc, {"c": ("F32", tensors["c"])})
    out = {}
    for elem in ELEMS:
        for rule in ["rceil", "floor"]:
            o = d / f"{elem}_{rule}.safetensors"
            cli("quantize", inp, o, "--elem", elem, "--scale-rule", rule)
            out[(elem, rule, "row")] = st.read(o)[0]
            oc = d / f"{elem}_{rule}_col.safetensors"
            cli("quantize", inc, oc, "--elem", elem, "--scale-rule", rule, "--axis", "col")
            out[(elem, rule, "col")] = st.read(oc)[0]
    o = d / "sr.safetensors"
    cli("quantize", inp, o, "--elem", "e4m3", "--scale-rule", "rceil", "--round", "stochastic", "--seed", "7")
    out["sr"] = st.read(o)[0]
    o = d / "deq.safetensors"
    cli("dequantize", d / "e4m3_rceil.safetensors", o)
    out["deq"] = st.read(o)[0]
    tensors["h"] = f16
    return tensors, out


@pytest.mark.parametrize("elem", ELEMS)
@pytest.mark.parametrize("rule", ["rceil", "floor"])
def test_quantize_equals_cli(cli_quantized, elem, rule):
    tensors, out = cli_quantized
    for name in ["a", "b", "h"]:
        codes, scales = mxrl.quantize(tensors[name], elem=elem, scale_rule=rule)
        assert out[(elem, rule, "row")][name][0] == CODE_DTYPE.get(elem, "U8")
        np.testing.assert_array_equal(codes, out[(elem, rule, "row")][name][1], err_msg=name)
        np.testing.assert_array_equal(scales, out[(elem, rule, "row")][name + "_scale"][1], err_msg=name)
    codes, scales = mxrl.quantize(tensors["c"], elem=elem, scale_rule=rule, axis=0)
    np.testing.assert_array_equal(codes, out[(elem, rule, "col")]["c"][1])
    np.testing.assert_array_equal(scales, out[(elem, rule, "col")]["c_scale"][1])
    assert scales.shape == (2, 5)


def test_stochastic_rounding_equals_cli(cli_quantized):
    tensors, out = cli_quantized
    for name in ["a", "b"]:
        codes, scales = mxrl.quantize(tensors[name], rounding="stochastic", seed=mxrl.tensor_seed(7, name))
        np.testing.assert_array_equal(codes, out["sr"][name][1])
        np.testing.assert_array_equal(scales, out["sr"][name + "_scale"][1])
    rne, _ = mxrl.quantize(tensors["a"])
    assert (rne != out["sr"]["a"][1]).any()  # stochastic rounding did round some values the other way


def test_dequantize_equals_cli(cli_quantized):
    tensors, out = cli_quantized
    for name in ["a", "b"]:
        codes, scales = mxrl.quantize(tensors[name])
        y = mxrl.dequantize(codes, scales)
        assert y.dtype == np.float32 and y.shape == tensors[name].shape
        np.testing.assert_array_equal(y.view(np.uint32), out["deq"][name][1].view(np.uint32))


def test_threads_do_not_change_bits():
    x = sample((64, 256), 9)
    c1, s1 = mxrl.quantize(x, threads=1)
    c2, s2 = mxrl.quantize(x, threads=2)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_array_equal(s1, s2)


def test_special_blocks():
    x = np.ones((3, 32), np.float32)
    x[0, 3] = np.nan
    x[1, :] = 0.0
    x[2, 0] = np.inf
    codes, scales = mxrl.quantize(x)
    assert list(scales[:, 0]) == [0xFF, 0x00, 0xFF]
    assert not codes.any()
    y = mxrl.dequantize(codes, scales)
    assert np.isnan(y[0]).all() and np.isnan(y[2]).all() and (y[1] == 0).all()


def test_rceil_scale_rule_by_hand():
    # amax 448 * 2^-3 = 56 -> descale 2^-3 exactly -> byte 124; one ulp more rounds the scale up to 125.
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = 56.0
    assert mxrl.quantize(x)[1][0, 0] == 124
    x[0, 0] = np.nextafter(np.float32(56.0), np.float32(100.0))
    assert mxrl.quantize(x)[1][0, 0] == 125
    assert mxrl.quantize(x, scale_rule="floor")[1][0, 0] == 124  # floor: exponent(56) = 5, emax 8: 2^-3


def test_element_grids():
    assert mxrl.format_info("e4m3")["max_normal"] == 448.0
    assert mxrl.format_info("e5m2")["max_normal"] == 57344.0
    g = mxrl.elem_grid("e2m1")
    assert list(g[:8]) == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    e4 = mxrl.elem_grid("e4m3")
    assert len(e4) == 256 and np.isnan(e4[0x7F]) and e4[0x7E] == 448.0 and e4[1] == 2.0**-9
    # Every code decodes to its value: quantizing the grid itself (scale 2^0 blocks) is the identity.
    finite = e4[np.isfinite(e4) & (np.abs(e4) <= 448)].astype(np.float32)
    block = np.zeros((1, 32), np.float32)
    for v in finite:
        block[0, 0] = v
        block[0, 1] = 448.0  # pins the scale to 2^0
        c, s = mxrl.quantize(block)
        assert s[0, 0] == 127 and e4[c[0, 0]] == v


def test_fp8_grids():
    x = sample((5, 300), 11).clip(-1e30, 1e30)
    for grid, sshape in [("per-tensor", (1, 1)), ("per-token", (5, 1)), ("block128", (1, 3)),
                         ("block128-act", (5, 3)), ((2, 7), (3, 43))]:
        codes, scales = mxrl.fp8_quantize(x, grid)
        assert codes.shape == x.shape and scales.shape == sshape and scales.dtype == np.float32
        y = mxrl.fp8_dequantize(codes, scales, grid)
        assert y.shape == x.shape
    # per-tensor: the scale is fp32(amax / 448), and re-quantizing what was decoded is the identity
    codes, scales = mxrl.fp8_quantize(x, "per-tensor")
    assert scales[0, 0] == np.float32(np.abs(x).max()) / np.float32(448.0)
    y = mxrl.fp8_dequantize(codes, scales)
    c2, s2 = mxrl.fp8_quantize(y, "per-tensor")
    np.testing.assert_array_equal(c2, codes)


def test_errors_name_the_problem():
    x = np.ones((2, 33), np.float32)
    with pytest.raises(ValueError, match=r"x: tensor has shape \[2, 33\]: row blocks need the last dimension to be a multiple of 32"):
        mxrl.quantize(x)
    with pytest.raises(ValueError, match="col blocks need a 2-D tensor whose first dimension is a multiple of 32"):
        mxrl.quantize(np.ones((33, 32), np.float32), axis=0)
    with pytest.raises(TypeError, match="x: dtype int32 is not supported; quantize takes float32, bfloat16 or float16"):
        mxrl.quantize(np.ones((2, 32), np.int32))
    with pytest.raises(TypeError, match="x: dtype float64"):
        mxrl.quantize(np.ones((2, 32)))
    with pytest.raises(ValueError, match="not C-contiguous"):
        mxrl.quantize(np.ones((2, 64), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="elem 'e9m9'"):
        mxrl.quantize(np.ones((2, 32), np.float32), elem="e9m9")
    with pytest.raises(ValueError, match="scale_rule 'ceil': expected rceil or floor"):
        mxrl.quantize(np.ones((2, 32), np.float32), scale_rule="ceil")
    with pytest.raises(ValueError, match="seed applies only with rounding='stochastic'"):
        mxrl.quantize(np.ones((2, 32), np.float32), seed=3)
    with pytest.raises(ValueError, match="a 0-d array"):
        mxrl.quantize(np.zeros((), np.float32))
    codes, scales = mxrl.quantize(np.ones((2, 64), np.float32))
    with pytest.raises(ValueError, match=r"scales: shape \[2, 1\] does not fit codes of shape \[2, 64\] \(expected \[2, 2\]\)"):
        mxrl.dequantize(codes, scales[:, :1].copy())
    with pytest.raises(TypeError, match="scales: dtype float32"):
        mxrl.dequantize(codes, scales.astype(np.float32))
    with pytest.raises(ValueError, match="grid 'tile'"):
        mxrl.fp8_quantize(np.ones((2, 32), np.float32), "tile")
    with pytest.raises(ValueError, match="elem 'e2m1': expected e4m3 or e5m2"):
        mxrl.fp8_quantize(np.ones((2, 32), np.float32), elem="e2m1")


def test_numpy_arrays_cross_without_copies():
    x = sample((8, 64), 5)
    codes, scales = mxrl.quantize(x)
    # numpy owns what mxrl returns; DLPack consumers share that memory.
    shared = np.from_dlpack(codes)
    assert shared.__array_interface__["data"][0] == codes.__array_interface__["data"][0]
    out = np.empty_like(x)
    ret = mxrl.dequantize(codes, scales, out=out)
    assert ret is out or ret.__array_interface__["data"][0] == out.__array_interface__["data"][0]
    np.testing.assert_array_equal(out, mxrl.dequantize(codes, scales))
    with pytest.raises(ValueError, match=r"out: shape \[8, 32\] differs"):
        mxrl.dequantize(codes, scales, out=np.empty((8, 32), np.float32))


def test_torch_round_trip_without_copies():
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(sample((4, 128), 6))
    codes, scales = mxrl.quantize(x)
    ref_c, ref_s = mxrl.quantize(x.numpy())
    np.testing.assert_array_equal(codes, ref_c)
    np.testing.assert_array_equal(scales, ref_s)
    tc = torch.from_dlpack(codes)  # torch views numpy's memory
    assert tc.data_ptr() == codes.__array_interface__["data"][0]
    # dequantize writes straight into a torch tensor and hands the same tensor back
    y = torch.empty_like(x)
    ptr = y.data_ptr()
    ret = mxrl.dequantize(tc.view(torch.float8_e4m3fn), torch.from_dlpack(scales), out=y)
    assert y.data_ptr() == ptr
    assert torch.equal(torch.from_dlpack(ret), y)
    np.testing.assert_array_equal(y.numpy(), mxrl.dequantize(codes, scales))
    # the codes are E4M3 bit patterns: torch decodes them to the same values
    torch_vals = tc.view(torch.float8_e4m3fn).float()
    assert torch.equal(torch_vals, torch.from_numpy(mxrl.elem_grid("e4m3")[codes]))
    # bfloat16 input is read as bfloat16
    xb = x.to(torch.bfloat16)
    cb, sb = mxrl.quantize(xb)
    c32, s32 = mxrl.quantize(xb.float())
    np.testing.assert_array_equal(cb, c32)
    np.testing.assert_array_equal(sb, s32)
    with pytest.raises(ValueError, match="not C-contiguous"):
        mxrl.quantize(x.t())
    with pytest.raises(TypeError, match="codes: dtype float8_e5m2 is not supported; expected uint8 or float8_e4m3fn"):
        mxrl.dequantize(tc.view(torch.float8_e5m2), torch.from_dlpack(scales))


def test_long_calls_release_the_gil():
    import threading
    import time
    x = np.ones((8192, 8192), np.float32)
    done = threading.Event()
    spans = []

    def work():
        t0 = time.perf_counter()
        for _ in range(3):
            mxrl.quantize(x, threads=1)
        spans.append(time.perf_counter() - t0)
        done.set()

    t = threading.Thread(target=work)
    gaps, last = [], time.perf_counter()
    t.start()
    while not done.is_set():  # this thread keeps running Python while the other is inside quantize
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
        time.sleep(0.001)
    t.join()
    one_call = spans[0] / 3
    # Holding the GIL, this thread would stall for a whole call at least once.
    assert one_call > 0.04, one_call  # the calls are long enough to tell
    assert max(gaps) < 0.5 * one_call, (max(gaps), one_call)
