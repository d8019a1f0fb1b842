// bf_dense_parallel: y = W x + b, fully parallel and pipelined; one sample per cycle (II = 1).
//
// The per-weight form: the RTL backend builds fully parallel layers as one shared shift-add graph by default
// (toolchain/backends/rtl/adder_graph.py; on the jet-mlp benchmarks 19-37% fewer LUTs, 3-5x fewer FFs) and uses this
// module when asked for (emitter option parallel="per_weight"), e.g. as the baseline the shared form is
// measured against.
//
// Bit-exact with emulate.dense_stage: every product x_i * w_oi is exact, the products of an output are
// summed exactly (bf_adder_tree), the bias aligned to the accumulator's fractional bits is added, the
// accumulator type's overflow (ACC_*) applies to that final sum, and bf_requant takes it to the output type.
//
// Weights are constants (packed parameters): each product is bf_const_mul, shifts and adds over the weight's
// canonical signed digits (no DSP block; nothing at all for a zero weight, wiring for a power of two). Sparse form: output o sums TERMS products; term t of output o multiplies
// input TERM_INDEX[(o*TERMS + t)*16 +: 16] by weight TERM_WEIGHT[(o*TERMS + t)*W_W +: W_W]. The emitter
// lists only the non-zero weights of each row and pads short rows with zero weights, which cost nothing and
// keep every output's tree the same depth (so all outputs share one latency). BIAS packs output o's bias
// code at [o*B_W +: B_W].
//
// Pipeline (all registers load on `advance`):
//   1 cycle      product registers (after bf_const_mul)
//   T cycles     adder tree, T = $clog2(TERMS) / LEVELS_PER_STAGE (bf_adder_tree)
//   1 cycle      bias + accumulator overflow + requantize (+ the fused ReLU), then the output register
// LATENCY = 2 + $clog2(TERMS) / LEVELS_PER_STAGE cycles, II = 1.
//
// Stream contract (stages.py): the pipeline advances when its output register is empty or being read
// (advance = !out_valid || out_ready) and accepts a sample exactly then (in_ready = advance), so a stall
// freezes every stage and holds out_data; bubbles travel as cleared valid bits.
`default_nettype none
module bf_dense_parallel #(
    parameter integer N_IN = 4,
    parameter integer N_OUT = 2,
    parameter integer IN_W = 8,
    parameter integer IN_FRAC = 0,
    parameter integer IN_SIGNED = 1,
    parameter integer TERMS = 4,
    parameter integer W_W = 8,
    parameter integer W_FRAC = 0,
    parameter integer W_SIGNED = 1,
    parameter [N_OUT*TERMS*16-1:0] TERM_INDEX = {N_OUT*TERMS*16{1'b0}},
    parameter [N_OUT*TERMS*W_W-1:0] TERM_WEIGHT = {N_OUT*TERMS*W_W{1'b0}},
    parameter integer HAS_BIAS = 0,
    parameter integer B_W = 8,
    parameter integer B_FRAC = 0,
    parameter integer B_SIGNED = 1,
    parameter [N_OUT*B_W-1:0] BIAS = {N_OUT*B_W{1'b0}},
    parameter integer ACC_W = 24,
    parameter integer ACC_FRAC = 0,
    parameter integer ACC_SIGNED = 1,
    parameter integer ACC_OVERFLOW = 0,
    parameter integer OUT_W = 8,
    parameter integer OUT_FRAC = 0,
    parameter integer OUT_SIGNED = 1,
    parameter integer OUT_ROUNDING = 0,
    parameter integer OUT_OVERFLOW = 0,
    // ACT = 1: the output is requantize(max(y, 0)) in the Y type (a ReLU fused into this stage, no register
    // of its own); ACT = 0: Y_* must equal OUT_*.
    parameter integer ACT = 0,
    parameter integer Y_W = OUT_W,
    parameter integer Y_FRAC = OUT_FRAC,
    parameter integer Y_SIGNED = OUT_SIGNED,
    parameter integer Y_ROUNDING = OUT_ROUNDING,
    parameter integer Y_OVERFLOW = OUT_OVERFLOW,
    parameter integer LEVELS_PER_STAGE = 2
) (
    input  wire                   clk,
    input  wire                   rst,
    input  wire                   in_valid,
    output wire                   in_ready,
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire [N_IN*IN_W-1:0]   in_data,  // an input whose weights are all zero is not read
    /* verilator lint_on UNUSEDSIGNAL */
    output wire                   out_valid,
    input  wire                   out_ready,
    output wire [N_OUT*Y_W-1:0]   out_data
);
    localparam integer P_W = IN_W + W_W;
    localparam integer P_SIGNED = (IN_SIGNED != 0 || W_SIGNED != 0) ? 1 : 0;
    localparam integer SUM_W = P_W + $clog2(TERMS);
    localparam integer LATENCY = 2 + $clog2(TERMS) / LEVELS_PER_STAGE;

    wire advance = !out_valid || out_ready;
    assign in_ready = advance;

    // Valid bits, one per pipeline register.
    reg [LATENCY-1:0] valid_q;  // LATENCY >= 2
    always @(posedge clk) begin
        if (rst) valid_q <= {LATENCY{1'b0}};
        else if (advance) valid_q <= {valid_q[LATENCY-2:0], in_valid};
    end
    assign out_valid = valid_q[LATENCY-1];

    genvar o, t;
    generate
        for (o = 0; o < N_OUT; o = o + 1) begin : g_out
            wire [TERMS*P_W-1:0] products;
            for (t = 0; t < TERMS; t = t + 1) begin : g_term
                localparam integer K = o * TERMS + t;
                localparam [W_W-1:0] WEIGHT = TERM_WEIGHT[K*W_W +: W_W];
                if (WEIGHT == {W_W{1'b0}}) begin : g_zero
                    assign products[t*P_W +: P_W] = {P_W{1'b0}};
                end else begin : g_mul
                    localparam integer IDX = {16'd0, TERM_INDEX[K*16 +: 16]};
                    wire [P_W-1:0] p;
                    if (W_W <= 30) begin : g_digits  // shifts and adds: no DSP block, LUTs per digit
                        bf_const_mul #(.A_W(IN_W), .A_SIGNED(IN_SIGNED), .C_W(W_W), .C_SIGNED(W_SIGNED), .C(WEIGHT))
                            u_mul (.a(in_data[IDX*IN_W +: IN_W]), .p(p));
                    end else begin : g_multiplier
                        bf_mul #(.A_W(IN_W), .A_FRAC(IN_FRAC), .A_SIGNED(IN_SIGNED),
                                 .B_W(W_W), .B_FRAC(W_FRAC), .B_SIGNED(W_SIGNED))
                            u_mul (.clk(clk), .en(advance), .a(in_data[IDX*IN_W +: IN_W]), .b(WEIGHT), .p(p));
                    end
                    reg [P_W-1:0] p_q;
                    always @(posedge clk) begin
                        if (advance) p_q <= p;
                    end
                    assign products[t*P_W +: P_W] = p_q;
                end
            end

            wire [SUM_W-1:0] sum;
            bf_adder_tree #(.N(TERMS), .IN_W(P_W), .IN_SIGNED(P_SIGNED), .LEVELS_PER_STAGE(LEVELS_PER_STAGE))
                u_tree (.clk(clk), .en(advance), .in_data(products), .out_data(sum));

            wire [OUT_W-1:0] y;
            bf_bias_requant #(
                .SUM_W(SUM_W), .SUM_SIGNED(P_SIGNED),
                .HAS_BIAS(HAS_BIAS), .B_W(B_W), .B_FRAC(B_FRAC), .B_SIGNED(B_SIGNED), .BIAS(BIAS[o*B_W +: B_W]),
                .ACC_W(ACC_W), .ACC_FRAC(ACC_FRAC), .ACC_SIGNED(ACC_SIGNED), .ACC_OVERFLOW(ACC_OVERFLOW),
                .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
                .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW)
            ) u_out (.sum(sum), .out_code(y));

            wire [Y_W-1:0] y_act;
            bf_activation #(
                .ACT(ACT), .IN_W(OUT_W), .IN_FRAC(OUT_FRAC), .IN_SIGNED(OUT_SIGNED),
                .OUT_W(Y_W), .OUT_FRAC(Y_FRAC), .OUT_SIGNED(Y_SIGNED), .OUT_ROUNDING(Y_ROUNDING),
                .OUT_OVERFLOW(Y_OVERFLOW)
            ) u_act (.in_code(y), .out_code(y_act));

            reg [Y_W-1:0] y_q;
            always @(posedge clk) begin
                if (advance) y_q <= y_act;
            end
            assign out_data[o*Y_W +: Y_W] = y_q;
        end
    endgenerate
endmodule
`default_nettype wire
