"""CPU tests of the pure-PyTorch NVFP4/MXFP4 reference (fp4graph.verify.nvfp4).

The C++ helpers below are ports, line for line, of flashinfer-python 0.6.3's
``csrc/nv_internal/tensorrt_llm/thop/fp4Op.cpp`` (``floatToE2M1``, ``computeSFIndex``,
``E2M1AndUFP8SFScaleToFloatV2``) and ``quantization.h`` (``computeSwizzledLayoutSFSize``);
the reference must agree with them.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

from fp4graph.verify import nvfp4

# --- ports of the C++ reference code (fp4Op.cpp, 0.6.3) -------------------------------

K_E2M1_ARRAY = [0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5]
K_E2M1_TO_FLOAT = [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def cpp_float_to_e2m1(value: float) -> int:
    """floatToE2M1 (asserts |value| < 8 in C++)."""
    abs_value = abs(value)
    assert abs_value < 8.0
    result = 8 if math.copysign(1.0, value) < 0 else 0
    fp4 = 7
    while fp4 > 0:
        if K_E2M1_ARRAY[fp4] < abs_value:
            break
        if K_E2M1_ARRAY[fp4] == abs_value and not (fp4 & 1):
            break
        fp4 -= 1
    return result | fp4


def cpp_compute_sf_index(
    row: int, col: int, total_row: int, total_column: int, swizzled: bool
) -> int:
    """computeSFIndex (SWIZZLED_128x4 / LINEAR)."""
    if swizzled:
        padded_column = (total_column + 3) // 4 * 4
        column_idx_in_group0 = col % 4
        column_group_idx = col // 4
        column_group_stride = 4 * 128
        row_idx_in_group0 = row % 32
        row_idx_in_group1 = row % 128 // 32
        row_group_idx = row // 128
        row_group1_stride = 4
        row_group0_stride = 4 * row_group1_stride
        row_group_stride = 128 * padded_column
        return (
            column_idx_in_group0
            + column_group_idx * column_group_stride
            + row_idx_in_group0 * row_group0_stride
            + row_idx_in_group1 * row_group1_stride
            + row_group_idx * row_group_stride
        )
    return row * total_column + col


def cpp_swizzled_sf_size(total_row: int, total_column: int, row_size: int = 128) -> int:
    """computeSwizzledLayoutSFSize / flashinfer's _compute_swizzled_layout_sf_size."""
    return ((total_row + row_size - 1) // row_size * row_size) * ((total_column + 3) // 4 * 4)


def cpp_dequantize(packed, sf_flat, global_scale_val, sf_vec_size, sf_type, swizzled):
    """E2M1AndUFP8SFScaleToFloatV2: ``global_scale_val`` multiplies the scale (pass 1/gs)."""
    rows, half = packed.shape
    hidden = half * 2
    groups = hidden // sf_vec_size
    out = torch.empty(rows, hidden)
    for v in range(rows):
        for g in range(groups):
            b = int(sf_flat[cpp_compute_sf_index(v, g, rows, groups, swizzled)])
            if sf_type == 0:
                scale = struct_float(b << 23)
            else:
                scale = float(
                    torch.tensor([b], dtype=torch.uint8).view(torch.float8_e4m3fn).float()
                )
            scale *= global_scale_val
            for i in range(sf_vec_size):
                byte = int(packed[v, g * sf_vec_size // 2 + i // 2])
                nib = (byte >> 4) if i % 2 else byte
                nib &= 0xF
                val = K_E2M1_TO_FLOAT[nib & 7] * (-1 if nib & 8 else 1)
                out[v, g * sf_vec_size + i] = val * scale
    return out


def struct_float(bits: int) -> float:
    return float(torch.tensor([bits], dtype=torch.int32).view(torch.float32))


# --- element formats ----------------------------------------------------------------


def test_e2m1_grid_decodes_to_the_fp4op_table():
    codes = torch.arange(16, dtype=torch.uint8)
    expect = K_E2M1_TO_FLOAT + [-v for v in K_E2M1_TO_FLOAT]
    assert nvfp4.e2m1_decode(codes).tolist() == expect


@pytest.mark.parametrize(
    "value, code",
    [
        (0.0, 0x0),
        (0.25, 0x0),
        (0.2500001, 0x1),
        (0.5, 0x1),
        (0.75, 0x2),
        (1.25, 0x2),
        (1.5, 0x3),
        (1.75, 0x4),
        (2.5, 0x4),
        (2.51, 0x5),
        (3.0, 0x5),
        (3.5, 0x6),
        (5.0, 0x6),
        (5.01, 0x7),
        (6.0, 0x7),
        (7.9, 0x7),
        (100.0, 0x7),
        (-0.1, 0x8),
        (-0.0, 0x8),
        (-0.75, 0xA),
        (-6.0, 0xF),
        (-1e9, 0xF),
    ],
)
def test_e2m1_encode_known_values(value, code):
    assert int(nvfp4.e2m1_encode(torch.tensor([value]))[0]) == code


def test_e2m1_encode_matches_float_to_e2m1():
    rng = random.Random(0)
    values = [b + d for b in K_E2M1_ARRAY for d in (-1e-6, 0.0, 1e-6)]
    values += [rng.uniform(-7.99, 7.99) for _ in range(4000)]
    values += [-v for v in values]
    values = [v for v in values if abs(v) < 8.0]
    got = nvfp4.e2m1_encode(torch.tensor(values, dtype=torch.float32)).tolist()
    # Compare on the float32 values the tensor holds.
    f32 = torch.tensor(values, dtype=torch.float32).tolist()
    assert got == [cpp_float_to_e2m1(v) for v in f32]


def test_pack_order_low_nibble_first():
    codes = torch.tensor([[0x1, 0x2, 0xF, 0x7]], dtype=torch.uint8)
    packed = nvfp4.pack_e2m1(codes)
    assert packed.tolist() == [[0x21, 0x7F]]
    assert torch.equal(nvfp4.unpack_e2m1(packed), codes)


def test_pack_rejects_odd_k():
    with pytest.raises(ValueError, match="even"):
        nvfp4.pack_e2m1(torch.zeros(3, dtype=torch.uint8))


def test_e4m3_encode_saturates_and_rounds_to_even():
    x = torch.tensor([1.0, 448.0, 500.0, 1e9, 0.0, 2.0**-9, 1.0625, 1.1875, 17.0])
    bits = nvfp4.e4m3_encode(x)
    assert bits[0] == 0x38 and bits[1] == 0x7E and bits[2] == 0x7E and bits[3] == 0x7E
    assert bits[4] == 0x00 and bits[5] == 0x01
    # 1.0625 is halfway between 1.0 (mantissa 0) and 1.125 (mantissa 1): even -> 1.0
    assert nvfp4.e4m3_decode(bits)[6] == 1.0
    # 1.1875 is halfway between 1.125 (mantissa 1) and 1.25 (mantissa 2): even -> 1.25
    assert nvfp4.e4m3_decode(bits)[7] == 1.25
    assert nvfp4.e4m3_decode(bits)[8] == 16.0  # 17 between 16 and 18: even mantissa -> 16


def test_ue8m0_rounds_up_to_a_power_of_two():
    x = torch.tensor([1.0, 1.5, 2.0, 2.0001, 0.0, 2.0**-127, 2.0**-126, 3e38, 2.0**127, 0.25])
    assert nvfp4.ue8m0_encode_ceil(x).tolist() == [127, 128, 128, 129, 0, 0, 1, 254, 254, 125]
    assert nvfp4.ue8m0_decode(torch.tensor([127, 128, 0], dtype=torch.uint8)).tolist() == [
        1.0,
        2.0,
        2.0**-127,
    ]


# --- layouts ------------------------------------------------------------------------

SHAPES = [(1, 4), (3, 5), (128, 4), (129, 8), (200, 17), (256, 256), (7, 1), (9, 12)]


@pytest.mark.parametrize("rows, cols", SHAPES)
@pytest.mark.parametrize("layout", nvfp4.LAYOUTS)
def test_swizzle_places_each_scale_at_the_kernel_offset(rows, cols, layout):
    ids = torch.arange(rows * cols, dtype=torch.int64).reshape(rows, cols) + 1
    buf = nvfp4.swizzle_sf(ids, layout)
    assert buf.numel() == nvfp4.sf_buffer_size(rows, cols, layout)
    offset = {
        "128x4": nvfp4.sf_offset_128x4,
        "8x4": nvfp4.sf_offset_8x4,
        "linear": nvfp4.sf_offset_linear,
    }[layout]
    seen = set()
    for m, k in itertools.product(range(rows), range(cols)):
        off = offset(m, k, rows, cols)
        assert int(buf[off]) == int(ids[m, k])
        seen.add(off)
    # every other byte is padding, and padding is zero
    pad = torch.ones(buf.numel(), dtype=torch.bool)
    pad[list(seen)] = False
    assert int(buf[pad].abs().sum()) == 0


@pytest.mark.parametrize("rows, cols", SHAPES)
def test_128x4_offset_matches_compute_sf_index(rows, cols):
    for m, k in itertools.product(range(rows), range(cols)):
        assert nvfp4.sf_offset_128x4(m, k, rows, cols) == cpp_compute_sf_index(
            m, k, rows, cols, True
        )
        assert nvfp4.sf_offset_linear(m, k, rows, cols) == cpp_compute_sf_index(
            m, k, rows, cols, False
        )


@pytest.mark.parametrize("rows, cols", SHAPES)
def test_buffer_sizes_match_flashinfer(rows, cols):
    assert nvfp4.sf_buffer_size(rows, cols, "128x4") == cpp_swizzled_sf_size(rows, cols, 128)
    assert nvfp4.sf_buffer_size(rows, cols, "8x4") == cpp_swizzled_sf_size(rows, cols, 8)
    assert nvfp4.sf_buffer_size(rows, cols, "linear") == rows * cols


@pytest.mark.parametrize("layout", nvfp4.LAYOUTS)
def test_batched_swizzle_uses_the_batch_stride(layout):
    b, rows, cols = 3, 130, 6
    ids = torch.arange(b * rows * cols, dtype=torch.int64).reshape(b, rows, cols) + 1
    buf = nvfp4.swizzle_sf(ids, layout)
    offset = {
        "128x4": nvfp4.sf_offset_128x4,
        "8x4": nvfp4.sf_offset_8x4,
        "linear": nvfp4.sf_offset_linear,
    }[layout]
    for bi, m, k in itertools.product(range(b), (0, 1, 31, 32, 127, 128, 129), range(cols)):
        assert int(buf[offset(m, k, rows, cols, bi)]) == int(ids[bi, m, k])
    assert torch.equal(nvfp4.unswizzle_sf(buf, rows, cols, layout, batch=b), ids)


@pytest.mark.parametrize("rows, cols", SHAPES)
@pytest.mark.parametrize("layout", nvfp4.LAYOUTS)
def test_unswizzle_inverts_swizzle(rows, cols, layout):
    sf = torch.randint(0, 256, (rows, cols), dtype=torch.uint8)
    assert torch.equal(nvfp4.unswizzle_sf(nvfp4.swizzle_sf(sf, layout), rows, cols, layout), sf)


def test_unswizzle_rejects_a_short_buffer():
    with pytest.raises(ValueError, match="needs"):
        nvfp4.unswizzle_sf(torch.zeros(10, dtype=torch.uint8), 2, 4, "128x4")


def test_unknown_layout_is_named():
    with pytest.raises(ValueError, match="'4x4'"):
        nvfp4.swizzle_sf(torch.zeros(2, 4), "4x4")  # type: ignore[arg-type]


# --- quantization -------------------------------------------------------------------


def test_nvfp4_known_block_is_exact():
    # amax 6 with global scale 1: block scale e4m3(6/6) = 1.0, values coded as themselves.
    vals = [6, 3, -1.5, 0.5, 0, -4, 2, 1, -6, 0.5, 1.5, -3, 4, -2, -1, -0.5]
    x = torch.tensor([vals], dtype=torch.bfloat16)
    q, sf = nvfp4.nvfp4_quantize(x, torch.tensor([1.0]), layout="linear")
    assert sf.tolist() == [0x38]
    assert nvfp4.e2m1_decode(nvfp4.unpack_e2m1(q)).tolist() == [[float(v) for v in vals]]
    assert q[0, 0] == 0x57  # 6 -> 0x7 low nibble, 3 -> 0x5 high nibble
    deq = nvfp4.nvfp4_dequantize(q, sf, 1.0, layout="linear")
    assert torch.equal(deq, x.float())


def test_nvfp4_global_scale_convention():
    # With FlashInfer's gs = 448*6/amax, the largest block's scale is e4m3 448 (0x7E)
    # and its amax element is coded as 6.
    torch.manual_seed(0)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    x[2, 17] = 10.0
    gs = nvfp4.nvfp4_global_scale(x)
    assert torch.allclose(gs, torch.tensor([448 * 6 / 10.0]))
    codes, sf = nvfp4.quantize_rowmajor(x, gs)
    assert int(sf[2, 1]) == 0x7E
    assert int(codes[2, 17]) == 0x7


def test_mxfp4_known_blocks():
    # amax 6 -> scale 2**0 (127); amax 7 -> 7/6 rounds up to 2 (128): values halve.
    a = torch.tensor([6.0, -3.0, 1.0, 0.5] + [0.0] * 28)
    b = torch.tensor([7.0, -3.0, 1.0, 0.5] + [0.0] * 28)
    x = torch.stack([a, b]).to(torch.bfloat16)
    codes, sf = nvfp4.quantize_rowmajor(x, None, 32, True)
    assert sf.tolist() == [[127], [128]]
    dec = nvfp4.e2m1_decode(codes)
    assert dec[0, :4].tolist() == [6.0, -3.0, 1.0, 0.5]
    assert dec[1, :4].tolist() == [4.0, -1.5, 0.5, 0.0]  # 7/2 = 3.5 ties to 4 (even code)


def test_mxfp4_ignores_the_global_scale():
    x = torch.randn(2, 64, dtype=torch.bfloat16)
    a = nvfp4.fp4_quantize(x, None, 32, True)
    b = nvfp4.fp4_quantize(x, torch.tensor([123.0]), 32, True)
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))


def test_nvfp4_requires_a_global_scale():
    with pytest.raises(ValueError, match="global_scale"):
        nvfp4.fp4_quantize(torch.randn(1, 16), None)


def test_zero_block_gives_zero_scale_and_codes():
    x = torch.zeros(1, 32, dtype=torch.bfloat16)
    q, sf = nvfp4.nvfp4_quantize(x, torch.tensor([1.0]), layout="linear")
    assert sf.tolist() == [0, 0] and int(q.sum()) == 0


@pytest.mark.parametrize("layout", nvfp4.LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_nvfp4_round_trip_error_is_within_half_an_e2m1_step(layout, dtype):
    torch.manual_seed(1)
    x = (torch.randn(37, 128) * torch.logspace(-2, 2, 37).unsqueeze(1)).to(dtype)
    gs = nvfp4.nvfp4_global_scale(x)
    q, sf = nvfp4.nvfp4_quantize(x, gs, layout)
    assert q.shape == (37, 64) and q.dtype == torch.uint8
    deq = nvfp4.nvfp4_dequantize(q, sf, gs, layout)
    codes, sf_rows = nvfp4.quantize_rowmajor(x, gs)
    block_scale = nvfp4.e4m3_decode(sf_rows) / gs  # dequant scale per block
    scaled = (x.float().reshape(37, 8, 16) / block_scale.unsqueeze(-1)).reshape(37, 128)
    dec = nvfp4.e2m1_decode(codes)
    # in the coded domain: nearest grid point, or saturated at 6
    half_step = nvfp4.e2m1_step(dec) / 2
    err = (scaled - dec).abs()
    sat = scaled.abs() > 6
    assert bool(((err <= half_step * 1.0001) | sat).all())
    assert torch.allclose(
        deq, (dec.reshape(37, 8, 16) * block_scale.unsqueeze(-1)).reshape(37, 128)
    )
    rel = (deq - x.float()).norm() / x.float().norm()
    assert rel < 0.15


def test_mxfp4_round_trip():
    torch.manual_seed(2)
    x = torch.randn(5, 96, dtype=torch.bfloat16) * 3
    q, sf = nvfp4.mxfp4_quantize(x)
    deq = nvfp4.mxfp4_dequantize(q, sf)
    assert ((deq - x.float()).norm() / x.float().norm()) < 0.2
    # every block's amax is coded within [4, 6] after scaling by a power of two >= amax/6
    _, sfr = nvfp4.quantize_rowmajor(x, None, 32, True)
    amax = x.float().abs().reshape(5, 3, 32).amax(-1)
    assert bool((nvfp4.ue8m0_decode(sfr) * 6 >= amax).all())


@pytest.mark.parametrize("swizzled", [True, False])
@pytest.mark.parametrize("is_nvfp4", [True, False])
def test_dequantize_matches_the_cpp_host_dequantizer(swizzled, is_nvfp4):
    torch.manual_seed(3)
    rows, k = 3, 64
    x = torch.randn(rows, k, dtype=torch.bfloat16)
    layout = "128x4" if swizzled else "linear"
    if is_nvfp4:
        gs = nvfp4.nvfp4_global_scale(x)
        q, sf = nvfp4.nvfp4_quantize(x, gs, layout)
        ours = nvfp4.nvfp4_dequantize(q, sf, gs, layout)
        theirs = cpp_dequantize(q, sf, float(1.0 / gs), 16, 1, swizzled)
    else:
        q, sf = nvfp4.mxfp4_quantize(x, layout)
        ours = nvfp4.mxfp4_dequantize(q, sf, layout)
        theirs = cpp_dequantize(q, sf, 1.0, 32, 0, swizzled)
    assert torch.allclose(ours, theirs, rtol=1e-6, atol=0)


def test_leading_dimensions_are_flattened_into_rows():
    x = torch.randn(2, 3, 32, dtype=torch.bfloat16)
    gs = nvfp4.nvfp4_global_scale(x)
    q3, sf3 = nvfp4.nvfp4_quantize(x, gs)
    q2, sf2 = nvfp4.nvfp4_quantize(x.reshape(6, 32), gs)
    assert q3.shape == (2, 3, 16)
    assert torch.equal(q3.reshape(6, 16), q2) and torch.equal(sf3, sf2)
