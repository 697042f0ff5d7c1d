"""Pure-PyTorch reference for FlashInfer's NVFP4 and MXFP4 quantization.

Runs on any device (CPU included) and follows flashinfer-python 0.6.3, file by file:

- ``csrc/nv_internal/tensorrt_llm/kernels/quantization_utils.cuh``
  ``cvt_warp_fp16_to_fp4`` (the arithmetic), ``get_sf_out_offset_128x4`` /
  ``get_sf_out_offset_8x4`` / ``cvt_quant_get_sf_out_offset`` (the scale layouts);
- ``csrc/nv_internal/tensorrt_llm/kernels/quantization.cuh``
  ``quantize_with_block_size`` (padding rows and columns of the scale buffer are zero);
- ``csrc/nv_internal/tensorrt_llm/thop/fp4Op.cpp`` ``computeSFIndex``,
  ``E2M1AndUFP8SFScaleToFloatV2``, ``floatToE2M1`` (host reference, tie to even);
- ``flashinfer/fp4_quantization.py`` (output shapes and the global-scale convention).

Conventions (all from those files):

- e2m1 code = sign bit (0x8) | index into :data:`E2M1_GRID` = (0, 0.5, 1, 1.5, 2, 3, 4, 6).
  Conversion rounds to nearest, ties to even code, and saturates at 6
  (``cvt.rn.satfinite.e2m1x2.f32``).
- Two codes per byte: element ``2i`` in the low nibble, ``2i+1`` in the high nibble.
- NVFP4: 16 elements share one e4m3 scale.  ``global_scale`` is the value FlashInfer takes,
  ``(448 * 6) / amax(x)``: it multiplies the block scale, ``sf = e4m3(gs * amax16 / 6)``, and
  the values are coded as ``e2m1(x * gs / sf)``; dequantization is ``e2m1 * sf / gs``.
- MXFP4: 32 elements share one ue8m0 scale (a power of two, rounded up):
  ``sf = ue8m0_ceil(amax32 / 6)``; values are ``e2m1(x / 2**(sf - 127))``.  As in the kernel,
  the global scale plays no part for fp16/bf16 input.
- Scale layouts: ``"128x4"`` (rows padded to 128, scale columns to 4; tiles of
  [32 rows x 4 row-groups x 4 columns]), ``"8x4"`` (rows padded to 8; tiles of
  [8 rows x 4 columns]) and ``"linear"`` (row-major, no padding).  Padding bytes are zero.

The arithmetic runs in float32 in the kernel's order.  The kernel's approximate
reciprocals (``rcp.approx.ftz.f32``) are taken as exact float32 reciprocals here, so a value
that lands within an ulp of an e2m1 rounding boundary may round to the neighbouring code;
compare against the GPU within one e2m1 step (:func:`e2m1_step`), not bitwise.
"""

from __future__ import annotations

from typing import Literal

import torch

Layout = Literal["128x4", "8x4", "linear"]
LAYOUTS: tuple[Layout, ...] = ("128x4", "8x4", "linear")

#: Magnitudes of the e2m1 codes 0..7 (code | 0x8 is the negative).
E2M1_GRID: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
#: Rounding boundaries between code i and i+1 (``kE2M1Array`` in fp4Op.cpp, without the 0).
_E2M1_BOUNDS: tuple[float, ...] = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
E2M1_MAX = 6.0
E4M3_MAX = 448.0
#: The global scale FlashInfer expects is ``NVFP4_GS_NUMERATOR / amax``.
NVFP4_GS_NUMERATOR = E4M3_MAX * E2M1_MAX


def _round_up(a: int, b: int) -> int:
    return (a + b - 1) // b * b


# --------------------------------------------------------------------------------------
# Element formats


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """float -> e2m1 codes (uint8, 0..15): round to nearest, ties to even code, saturate at 6.

    The sign bit follows the sign of ``x`` (so -0.1 gives 0x8, negative zero), as in
    ``floatToE2M1``.  NaN gives the largest code of its sign.
    """
    xf = x.float()
    mag = xf.abs()
    bounds = torch.tensor(_E2M1_BOUNDS, dtype=torch.float32, device=x.device)
    code = torch.searchsorted(bounds, mag.contiguous(), right=False)  # boundaries < mag
    # A value exactly on a boundary goes to the even code of the two around it.
    on_bound = (code < len(_E2M1_BOUNDS)) & (mag == bounds[code.clamp(max=len(_E2M1_BOUNDS) - 1)])
    code = torch.where(on_bound & (code % 2 == 1), code + 1, code)
    code = torch.where(torch.isnan(mag), torch.full_like(code, 7), code)
    sign = torch.signbit(xf).to(torch.int64) << 3
    return (code | sign).to(torch.uint8)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """e2m1 codes (any integer dtype, low 4 bits used) -> float32."""
    table = torch.tensor(
        E2M1_GRID + tuple(-v for v in E2M1_GRID), dtype=torch.float32, device=codes.device
    )
    return table[(codes.to(torch.int64) & 0xF)]


def e2m1_step(value: torch.Tensor) -> torch.Tensor:
    """Distance from an e2m1 magnitude to the next larger one (1 for 4 and 6, 2 for 6's next).

    Used as the tolerance of "within e2m1 rounding": one code apart.
    """
    mag = value.float().abs()
    step = torch.full_like(mag, 0.5)
    step = torch.where(mag >= 2.0, torch.full_like(mag, 1.0), step)
    step = torch.where(mag >= 4.0, torch.full_like(mag, 2.0), step)
    return step


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] codes -> [..., K/2] bytes; element 2i in the low nibble, 2i+1 in the high."""
    if codes.shape[-1] % 2:
        raise ValueError(f"the last dimension must be even to pack e2m1 pairs, got {codes.shape}")
    c = codes.to(torch.uint8) & 0xF
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] bytes -> [..., K] codes (the inverse of :func:`pack_e2m1`)."""
    p = packed.view(torch.uint8) if packed.dtype != torch.uint8 else packed
    lo = p & 0xF
    hi = p >> 4
    return torch.stack((lo, hi), dim=-1).reshape(*p.shape[:-1], p.shape[-1] * 2)


def e4m3_encode(x: torch.Tensor) -> torch.Tensor:
    """float -> e4m3fn bits (uint8): round to nearest even, saturate at 448 (satfinite)."""
    xf = x.float().clamp(min=-E4M3_MAX, max=E4M3_MAX)
    return xf.to(torch.float8_e4m3fn).view(torch.uint8)


def e4m3_decode(bits: torch.Tensor) -> torch.Tensor:
    """e4m3fn bits (uint8) -> float32."""
    return bits.to(torch.uint8).view(torch.float8_e4m3fn).float()


def ue8m0_encode_ceil(x: torch.Tensor) -> torch.Tensor:
    """Non-negative float -> ue8m0 (biased exponent, uint8), rounding up to a power of two.

    ``__nv_cvt_float_to_e8m0(x, __NV_SATFINITE, cudaRoundPosInf)``: 0 -> 0 (2**-127),
    finite results saturate at 254 (2**127).
    """
    bits = x.float().contiguous().view(torch.int32).to(torch.int64) & 0x7FFFFFFF
    exp = bits >> 23
    mant = bits & 0x7FFFFF
    code = exp + (mant != 0).to(torch.int64)
    # float32 subnormals: at most 2**-127 -> 0, above -> 1.
    code = torch.where(exp == 0, (mant > 0x400000).to(torch.int64), code)
    return code.clamp(max=254).to(torch.uint8)


def ue8m0_decode(codes: torch.Tensor) -> torch.Tensor:
    """ue8m0 -> float32 ``2**(code - 127)`` (255, NaN, is not produced by the encoder)."""
    return torch.exp2(codes.to(torch.float32) - 127.0)


# --------------------------------------------------------------------------------------
# Scale-factor layouts


def sf_offset_128x4(
    m_idx: int, k_idx: int, num_rows: int, num_col_vecs: int, batch_idx: int = 0
) -> int:
    """``get_sf_out_offset_128x4`` (quantization_utils.cuh), line for line.

    ``k_idx`` and ``num_col_vecs`` count scale-factor columns (K / sf_vec_size).
    """
    inner_k_idx = k_idx % 4
    inner_k_stride = 1
    inner_m_idx = (m_idx % (32 * 4)) // 32
    inner_m_stride = 4 * inner_k_stride
    outer_m_idx = m_idx % 32
    outer_m_stride = 4 * inner_m_stride
    k_tile_idx = k_idx // 4
    k_tile_stride = 32 * outer_m_stride
    num_k_tiles = (num_col_vecs + 4 - 1) // 4
    m_tile_idx = m_idx // (32 * 4)
    m_tile_stride = num_k_tiles * k_tile_stride
    num_m_tiles = (num_rows + 128 - 1) // 128
    b_tile_stride = num_m_tiles * m_tile_stride
    return (
        batch_idx * b_tile_stride
        + m_tile_idx * m_tile_stride
        + k_tile_idx * k_tile_stride
        + outer_m_idx * outer_m_stride
        + inner_m_idx * inner_m_stride
        + inner_k_idx * inner_k_stride
    )


def sf_offset_8x4(m_idx: int, k_idx: int, num_rows: int, num_cols: int, batch_idx: int = 0) -> int:
    """``get_sf_out_offset_8x4`` (quantization_utils.cuh), line for line."""
    m_tile = 8
    inner_k_idx = k_idx % 4
    inner_k_stride = 1
    inner_m_idx = m_idx % m_tile
    m_stride = 4 * inner_k_stride
    k_tile_idx = k_idx // 4
    k_tile_stride = m_tile * m_stride
    num_k_tiles = (num_cols + 4 - 1) // 4
    m_tile_idx = m_idx // m_tile
    m_tile_stride = num_k_tiles * k_tile_stride
    num_m_tiles = (num_rows + 8 - 1) // 8
    b_tile_stride = num_m_tiles * m_tile_stride
    return (
        batch_idx * b_tile_stride
        + m_tile_idx * m_tile_stride
        + k_tile_idx * k_tile_stride
        + inner_m_idx * m_stride
        + inner_k_idx * inner_k_stride
    )


def sf_offset_linear(
    m_idx: int, k_idx: int, num_rows: int, num_col_vecs: int, batch_idx: int = 0
) -> int:
    """The LINEAR branch of ``cvt_quant_get_sf_out_offset``: row-major, no padding."""
    return batch_idx * num_rows * num_col_vecs + m_idx * num_col_vecs + k_idx


def sf_buffer_size(rows: int, sf_cols: int, layout: Layout) -> int:
    """Bytes of one (unbatched) scale buffer: ``_compute_swizzled_layout_sf_size`` for
    the swizzled layouts (rows padded to 128 or 8, columns to 4), ``rows * sf_cols`` for linear.
    """
    if layout == "linear":
        return rows * sf_cols
    row_tile = 128 if layout == "128x4" else 8
    return _round_up(rows, row_tile) * _round_up(sf_cols, 4)


def _check_layout(layout: str) -> Layout:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown scale layout {layout!r}; expected one of {LAYOUTS}")
    return layout


def swizzle_sf(sf: torch.Tensor, layout: Layout = "128x4") -> torch.Tensor:
    """[M, C] or [B, M, C] scale bytes (row-major) -> the flat scale buffer of ``layout``.

    Padding rows and columns are zero.  For a batch the buffers follow each other
    (``batch_idx * b_tile_stride``).
    """
    layout = _check_layout(layout)
    batched = sf.dim() == 3
    s = sf if batched else sf.unsqueeze(0)
    b, m, c = s.shape
    if layout == "linear":
        return s.reshape(-1).clone()
    row_tile = 128 if layout == "128x4" else 8
    mp, cp = _round_up(m, row_tile), _round_up(c, 4)
    padded = s.new_zeros((b, mp, cp))
    padded[:, :m, :c] = s
    if layout == "128x4":
        # row = m_tile*128 + inner_m*32 + outer_m ; col = k_tile*4 + inner_k
        t = padded.reshape(b, mp // 128, 4, 32, cp // 4, 4)
        # -> [b, m_tile, k_tile, outer_m, inner_m, inner_k]
        t = t.permute(0, 1, 4, 3, 2, 5)
    else:
        t = padded.reshape(b, mp // 8, 8, cp // 4, 4).permute(0, 1, 3, 2, 4)
    return t.reshape(-1).contiguous()


def unswizzle_sf(
    buf: torch.Tensor, rows: int, sf_cols: int, layout: Layout = "128x4", batch: int | None = None
) -> torch.Tensor:
    """Flat (or any-shaped) scale buffer of ``layout`` -> [rows, sf_cols] (or [batch, rows,
    sf_cols]) row-major scale bytes, dropping the padding.  Inverse of :func:`swizzle_sf`."""
    layout = _check_layout(layout)
    b = 1 if batch is None else batch
    flat = buf.reshape(-1)
    size = sf_buffer_size(rows, sf_cols, layout)
    if flat.numel() < b * size:
        raise ValueError(
            f"scale buffer has {flat.numel()} bytes; layout {layout} with {b}x{rows}x{sf_cols} "
            f"scales needs {b * size}"
        )
    flat = flat[: b * size]
    if layout == "linear":
        out = flat.reshape(b, rows, sf_cols)
    else:
        row_tile = 128 if layout == "128x4" else 8
        mp, cp = _round_up(rows, row_tile), _round_up(sf_cols, 4)
        if layout == "128x4":
            t = flat.reshape(b, mp // 128, cp // 4, 32, 4, 4).permute(0, 1, 4, 3, 2, 5)
        else:
            t = flat.reshape(b, mp // 8, cp // 4, 8, 4).permute(0, 1, 3, 2, 4)
        out = t.reshape(b, mp, cp)[:, :rows, :sf_cols]
    out = out.contiguous()
    return out if batch is not None else out[0]


# --------------------------------------------------------------------------------------
# Quantize / dequantize


def nvfp4_global_scale(x: torch.Tensor) -> torch.Tensor:
    """FlashInfer's global scale for ``x``: ``(448 * 6) / amax(|x|)``, float32, shape [1]."""
    amax = x.float().abs().nan_to_num().max()
    return (NVFP4_GS_NUMERATOR / amax).reshape(1).to(torch.float32)


def _blocks(x: torch.Tensor, sf_vec_size: int) -> torch.Tensor:
    k = x.shape[-1]
    if k % sf_vec_size:
        raise ValueError(f"K={k} is not a multiple of sf_vec_size={sf_vec_size}")
    return x.reshape(*x.shape[:-1], k // sf_vec_size, sf_vec_size)


def quantize_rowmajor(
    x: torch.Tensor,
    global_scale: torch.Tensor | float | None = None,
    sf_vec_size: int = 16,
    sf_use_ue8m0: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` [..., K] -> (e2m1 codes [..., K] uint8, scale bytes [..., K/sf_vec_size]).

    The arithmetic of ``cvt_warp_fp16_to_fp4`` for fp16/bf16/fp32 input.  ``sf_use_ue8m0``
    selects the MXFP4 recipe (ue8m0 scales, global scale unused), otherwise NVFP4 (e4m3 scales;
    ``global_scale`` required, as the op requires it).
    """
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"the NVFP4 reference quantizes fp16/bf16/fp32 input, got {x.dtype}")
    xb = _blocks(x, sf_vec_size).float()
    vec_max = xb.abs().amax(dim=-1)  # exact: a max of input values
    rcp6 = torch.tensor(1.0 / 6.0, dtype=torch.float32)
    if sf_use_ue8m0:
        scaled_max = vec_max * rcp6
        sf = ue8m0_encode_ceil(scaled_max)
        code = sf.to(torch.float32)
        rcp_scale = torch.where(code == 0, torch.ones_like(code), torch.exp2(127.0 - code))
        output_scale = torch.where(vec_max != 0, rcp_scale, torch.zeros_like(rcp_scale))
    else:
        if global_scale is None:
            raise ValueError("NVFP4 (e4m3 scales) needs a global_scale, as FlashInfer does")
        gs = torch.as_tensor(global_scale, dtype=torch.float32).reshape(-1)[0].to(x.device)
        sf_value = gs * (vec_max * rcp6.to(x.device))
        sf = e4m3_encode(sf_value)
        sf_narrow = e4m3_decode(sf)
        # outputScale = rcp(SFValue * rcp(SFScaleVal)); a scale that underflowed to 0 in e4m3
        # gives inf here, as in the kernel (such blocks are ~2**-9 below the tensor's amax).
        output_scale = torch.where(
            vec_max != 0,
            torch.reciprocal(sf_narrow * torch.reciprocal(gs)),
            torch.zeros_like(sf_narrow),
        )
    codes = e2m1_encode(xb * output_scale.to(xb.device).unsqueeze(-1))
    return codes.reshape(x.shape), sf


def fp4_quantize(
    x: torch.Tensor,
    global_scale: torch.Tensor | float | None = None,
    sf_vec_size: int = 16,
    sf_use_ue8m0: bool = False,
    layout: Layout = "128x4",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference of ``flashinfer.fp4_quantize`` for row-major [..., K] input.

    Returns (packed e2m1 [..., K/2] uint8, flat scale buffer uint8 in ``layout``).  Rows are
    all leading dimensions flattened, as the kernel does (``m = numel / K``).  FlashInfer's
    public function reshapes its scale buffer to ``(-1, K // sf_vec_size)``; compare flat.
    """
    codes, sf = quantize_rowmajor(x, global_scale, sf_vec_size, sf_use_ue8m0)
    k = x.shape[-1]
    m = x.numel() // k
    return pack_e2m1(codes), swizzle_sf(sf.reshape(m, k // sf_vec_size), layout)


def nvfp4_quantize(
    x: torch.Tensor, global_scale: torch.Tensor | float, layout: Layout = "128x4"
) -> tuple[torch.Tensor, torch.Tensor]:
    """NVFP4: e4m3 scales per 16 elements, float32 global scale (see module docstring)."""
    return fp4_quantize(x, global_scale, 16, False, layout)


def mxfp4_quantize(x: torch.Tensor, layout: Layout = "128x4") -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP4: ue8m0 scales per 32 elements (``flashinfer.mxfp4_quantize`` uses 128x4)."""
    return fp4_quantize(x, None, 32, True, layout)


def dequantize(
    packed: torch.Tensor,
    sf_buf: torch.Tensor,
    *,
    sf_vec_size: int = 16,
    sf_use_ue8m0: bool = False,
    global_scale: torch.Tensor | float | None = None,
    layout: Layout = "128x4",
) -> torch.Tensor:
    """Packed e2m1 [..., K/2] + scale buffer -> float32 [..., K].

    NVFP4: ``e2m1 * e4m3(sf) / global_scale`` (FlashInfer's host dequantizer takes the
    inverse, ``1 / global_scale``); MXFP4: ``e2m1 * 2**(sf - 127)``.
    """
    codes = unpack_e2m1(packed)
    k = codes.shape[-1]
    m = codes.numel() // k
    sf = unswizzle_sf(sf_buf, m, k // sf_vec_size, layout)
    if sf_use_ue8m0:
        scale = ue8m0_decode(sf)
    else:
        if global_scale is None:
            raise ValueError("NVFP4 dequantization needs the global_scale used to quantize")
        gs = torch.as_tensor(global_scale, dtype=torch.float32).reshape(-1)[0].to(sf.device)
        scale = e4m3_decode(sf) / gs
    vals = e2m1_decode(codes).reshape(m, k // sf_vec_size, sf_vec_size)
    return (vals * scale.unsqueeze(-1)).reshape(codes.shape)


def nvfp4_dequantize(
    packed: torch.Tensor,
    sf_buf: torch.Tensor,
    global_scale: torch.Tensor | float,
    layout: Layout = "128x4",
) -> torch.Tensor:
    return dequantize(packed, sf_buf, global_scale=global_scale, layout=layout)


def mxfp4_dequantize(
    packed: torch.Tensor, sf_buf: torch.Tensor, layout: Layout = "128x4"
) -> torch.Tensor:
    return dequantize(packed, sf_buf, sf_vec_size=32, sf_use_ue8m0=True, layout=layout)
