// bf_bias_requant: the end of one dense output, combinational: exact sum + bias -> accumulator -> output code.
//
// Computes, as emulate.dense_stage does for one output,
//     acc = apply_overflow(sum + (BIAS << (ACC_FRAC - B_FRAC)), ACC type);  out = requantize(acc, ACC, OUT)
// `sum` is the exact sum of products (SUM_W bits, ACC_FRAC fractional bits, SUM_SIGNED), BIAS a constant
// code of the bias type (ignored when HAS_BIAS = 0). The bias is aligned by appending zero bits (the IR
// guarantees B_FRAC <= ACC_FRAC) and added exactly in one more bit than the wider operand, so the only
// overflow is the accumulator's own, applied once to the final sum as the golden model does. Latency 0.
`default_nettype none
module bf_bias_requant #(
    parameter integer SUM_W = 20,
    parameter integer SUM_SIGNED = 1,
    parameter integer HAS_BIAS = 0,
    parameter integer B_W = 8,
    parameter integer B_FRAC = 0,
    parameter integer B_SIGNED = 1,
    parameter [B_W-1:0] BIAS = {B_W{1'b0}},
    parameter integer ACC_W = 24,
    parameter integer ACC_FRAC = 0,
    parameter integer ACC_SIGNED = 1,
    parameter integer ACC_OVERFLOW = 0,
    parameter integer OUT_W = 8,
    parameter integer OUT_FRAC = 0,
    parameter integer OUT_SIGNED = 1,
    parameter integer OUT_ROUNDING = 0,
    parameter integer OUT_OVERFLOW = 0
) (
    input  wire [SUM_W-1:0] sum,
    output wire [OUT_W-1:0] out_code
);
    localparam integer SS_W = SUM_W + (SUM_SIGNED != 0 ? 0 : 1);           // signed view of the sum
    localparam integer BA_W = B_W + (ACC_FRAC - B_FRAC) + (B_SIGNED != 0 ? 0 : 1);  // aligned bias, signed
    localparam integer T_W = (HAS_BIAS != 0) ? ((SS_W > BA_W ? SS_W : BA_W) + 1) : SS_W;

    wire [SS_W-1:0] ss;
    generate
        if (SUM_SIGNED != 0) begin : g_sum_signed
            assign ss = sum;
        end else begin : g_sum_unsigned
            assign ss = {1'b0, sum};
        end
    endgenerate

    wire [T_W-1:0] total;
    generate
        if (HAS_BIAS != 0) begin : g_bias
            localparam integer SH = ACC_FRAC - B_FRAC;
            // Signed view of the bias shifted up by SH; the zero bits on top keep every replication count
            // non-zero (SH may be 0) and are not read: the low BA_W bits are the aligned bias.
            localparam [B_W:0] BS = {(B_SIGNED != 0) ? BIAS[B_W-1] : 1'b0, BIAS};
            localparam [B_W+SH+1:0] BA = {{(SH + 1){1'b0}}, BS} << SH;
            wire [T_W-1:0] bias_x = {{(T_W - BA_W){BA[BA_W-1]}}, BA[BA_W-1:0]};
            wire [T_W-1:0] sum_x = {{(T_W - SS_W){ss[SS_W-1]}}, ss};
            assign total = sum_x + bias_x;
        end else begin : g_no_bias
            assign total = ss;
        end
    endgenerate

    wire [ACC_W-1:0] acc;
    bf_requant #(
        .IN_W(T_W), .IN_FRAC(ACC_FRAC), .IN_SIGNED(1),
        .OUT_W(ACC_W), .OUT_FRAC(ACC_FRAC), .OUT_SIGNED(ACC_SIGNED), .OUT_ROUNDING(0), .OUT_OVERFLOW(ACC_OVERFLOW)
    ) u_acc (.in_code(total), .out_code(acc));

    bf_requant #(
        .IN_W(ACC_W), .IN_FRAC(ACC_FRAC), .IN_SIGNED(ACC_SIGNED),
        .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
        .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW)
    ) u_out (.in_code(acc), .out_code(out_code));
endmodule
`default_nettype wire
