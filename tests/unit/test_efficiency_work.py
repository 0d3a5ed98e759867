"""FLOPs and bytes per call from recorded shapes, on the meta device (torch's flop_counter formulas)."""

from __future__ import annotations

from diagnose.layers.efficiency.work import estimate

COMPULSORY = "inputs read once + outputs written once (compulsory traffic, a lower bound)"


def test_matmul_flops_are_two_mnk_and_bytes_the_three_matrices():
    e = estimate({"name": "aten::mm", "input_shapes": [[256, 1024], [1024, 512]], "dtypes": ["float", "float"]})
    assert e.flops == 2 * 256 * 1024 * 512 and e.flops_source == "flop_counter"
    assert e.bytes == 4 * (256 * 1024 + 1024 * 512 + 256 * 512) and e.bytes_source == COMPULSORY
    assert e.output_shapes == [[256, 512]] and e.contiguous is True


def test_addmm_and_bmm_beyond_what_with_flops_covers():
    e = estimate({"name": "aten::addmm", "input_shapes": [[1024], [256, 512], [512, 1024], [], []],
                  "dtypes": ["float", "float", "float", "Scalar", "Scalar"]})
    assert e.flops == 2 * 256 * 512 * 1024
    b = estimate({"name": "aten::baddbmm", "input_shapes": [[8, 64, 64], [8, 64, 32], [8, 32, 64], [], []],
                  "dtypes": ["float"] * 3 + ["Scalar", "Scalar"]})
    assert b.flops == 2 * 8 * 64 * 32 * 64 and b.flops_source == "flop_counter"


def test_recorded_strides_are_kept_and_a_transposed_input_is_not_contiguous():
    e = estimate({"name": "aten::bmm", "input_shapes": [[8, 512, 64], [8, 64, 512]], "dtypes": ["float", "float"],
                  "input_strides": [[32768, 64, 1], [32768, 1, 64]]})
    assert e.contiguous is False and e.flops == 2 * 8 * 512 * 64 * 512


def test_pointwise_softmax_and_reductions_are_estimates():
    div = estimate({"name": "aten::div", "input_shapes": [[32, 512, 512], []], "dtypes": ["float", "double"]})
    n = 32 * 512 * 512
    assert div.flops == n and div.flops_source.startswith("pointwise")
    assert div.bytes == 2 * 4 * n + 8  # the scalar divisor is a 0-d double tensor
    sm = estimate({"name": "aten::_softmax", "input_shapes": [[32, 512, 512], [], []],
                   "dtypes": ["float", "Scalar", "Scalar"]})
    assert sm.flops == 5 * n and "exp counted as 1" in sm.flops_source
    s = estimate({"name": "aten::sum", "input_shapes": [[256, 1024], [], [], []],
                  "dtypes": ["float", "ScalarList", "Scalar", ""]})
    assert s.flops == 256 * 1024 and s.output_shapes == [[1024]]


def test_broadcast_input_is_read_once_and_copy_destination_is_written_not_read():
    add = estimate({"name": "aten::add", "input_shapes": [[64, 128], [64, 128], []],
                    "dtypes": ["float", "float", "Scalar"], "input_strides": [[128, 1], [0, 1], []]})
    assert add.bytes == 4 * (64 * 128 + 128 + 64 * 128)
    cp = estimate({"name": "aten::copy_", "input_shapes": [[256, 1024], [256, 1024], []],
                   "dtypes": ["float", "float", "Scalar"]})
    assert cp.bytes == 2 * 4 * 256 * 1024 and cp.flops is None


def test_composites_and_non_operators_get_no_flops_with_a_reason():
    lin = estimate({"name": "aten::linear", "input_shapes": [[64, 128], [256, 128], [256]],
                    "dtypes": ["float", "float", "float"]})
    assert lin.flops is None  # its addmm child has the FLOPs, against its own self time
    auto = estimate({"name": "autograd::engine::evaluate_function: AddmmBackward0", "input_shapes": [],
                     "dtypes": []})
    assert auto.flops is None and auto.bytes is None and "not an ATen operator" in auto.reason


def test_a_gather_reads_the_rows_it_picks_not_the_whole_table():
    # one embedding lookup of 2 x 8 tokens in BERT's [30522, 256] table reads 16 rows, not 31 MB
    e = estimate({"name": "aten::embedding", "input_shapes": [[30522, 256], [2, 8], [], [], []],
                  "dtypes": ["float", "long", "Scalar", "Scalar", "Scalar"]})
    rows = 2 * 8 * 256 * 4
    assert e.output_shapes == [[2, 8, 256]] and e.bytes == rows + 2 * 8 * 8 + rows


def test_the_cpu_flash_attention_kernel_counts_its_two_matmuls():
    # BERT's attention on CPU: the kernel flop_counter does not register; bytes alone made it "7% of the memory
    # roof" (a bytes roofline for a compute kernel)
    shapes = [[8, 4, 128, 64]] * 3 + [[], [], [], []]
    e = estimate({"name": "aten::_scaled_dot_product_flash_attention_for_cpu", "input_shapes": shapes,
                  "dtypes": ["float"] * 3 + ["Scalar", "Scalar", "", "Scalar"]})
    assert e.flops == 4 * 8 * 4 * 128 * 128 * 64 and "attention" in e.flops_source, e


def test_an_out_call_is_rebuilt_with_its_out_overload_and_its_out_tensor_is_written_not_read():
    # a compiled graph's GEMM (extern_kernels.addmm(bias, x, w, out=buf)): the profiler records the out tensor
    # as a sixth input; only addmm.out takes that row, and its out tensor is written once, never read
    e = estimate({"name": "aten::addmm", "input_shapes": [[512], [64, 512], [512, 512], [], [], [64, 512]],
                  "dtypes": ["float", "float", "float", "Scalar", "Scalar", "float"]})
    assert e.reason is None and e.flops == 2 * 64 * 512 * 512 and e.flops_source == "flop_counter"
    assert e.output_shapes == [[64, 512]]
    assert e.bytes == 4 * (512 + 64 * 512 + 512 * 512) + 4 * 64 * 512
    # aten::std's own sum into its [4096, 1] buffer, with the values the recorder took
    s = estimate({"name": "aten::sum", "input_shapes": [[4096, 4096], [], [], [], [4096, 1]],
                  "dtypes": ["float", "ScalarList", "Scalar", "Scalar", "float"],
                  "concrete_inputs": [None, [1], True, 6, None]})
    assert s.reason is None and s.output_shapes == [[4096, 1]]
    assert s.flops == 4096 * 4096 and s.bytes == 4 * (4096 * 4096 + 4096)
