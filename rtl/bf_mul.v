// bf_mul: fixed-point multiply, exact product optionally requantized, optionally registered.
//
// p = requantize(a * b) where a * b is the full-precision product of fixed.multiply: A_W + B_W bits,
// A_FRAC + B_FRAC fractional bits, signed when either operand is. The OUT_* parameters default to that
// product type, in which case bf_requant is a plain wire; any other type rounds and overflows exactly as
// fixed.requantize does (OUT_ROUNDING / OUT_OVERFLOW as stages.ROUNDING_CODE / OVERFLOW_CODE).
// Latency OUT_REG cycles (0 or 1; the register loads when en is high), II 1.
//
// Why the operands are widened: a mixed signed x unsigned product is one signed multiply once the unsigned
// operand gets a zero bit on top. The product is then exact in A_W + B_W bits (the widened multiply has one
// or two redundant top bits, dropped here), so the requantizer sees the true product type and synthesis
// sees a single $mul of the operands' widths (a DSP block, or constant shifts-and-adds when one side is a
// constant).
`default_nettype none
module bf_mul #(
    parameter integer A_W = 8,
    parameter integer A_FRAC = 0,
    parameter integer A_SIGNED = 1,
    parameter integer B_W = 8,
    parameter integer B_FRAC = 0,
    parameter integer B_SIGNED = 1,
    parameter integer OUT_W = A_W + B_W,
    parameter integer OUT_FRAC = A_FRAC + B_FRAC,
    parameter integer OUT_SIGNED = (A_SIGNED != 0 || B_SIGNED != 0) ? 1 : 0,
    parameter integer OUT_ROUNDING = 0,
    parameter integer OUT_OVERFLOW = 0,
    parameter integer OUT_REG = 0
) (
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire             clk,  // unused when OUT_REG = 0
    input  wire             en,
    /* verilator lint_on UNUSEDSIGNAL */
    input  wire [A_W-1:0]   a,
    input  wire [B_W-1:0]   b,
    output wire [OUT_W-1:0] p
);
    localparam integer P_W = A_W + B_W;
    localparam integer P_SIGNED = (A_SIGNED != 0 || B_SIGNED != 0) ? 1 : 0;
    localparam integer SA_W = A_W + (A_SIGNED != 0 ? 0 : 1);
    localparam integer SB_W = B_W + (B_SIGNED != 0 ? 0 : 1);

    wire signed [SA_W-1:0] sa;
    wire signed [SB_W-1:0] sb;
    generate
        if (A_SIGNED != 0) begin : g_a_signed
            assign sa = a;
        end else begin : g_a_unsigned
            assign sa = {1'b0, a};
        end
        if (B_SIGNED != 0) begin : g_b_signed
            assign sb = b;
        end else begin : g_b_unsigned
            assign sb = {1'b0, b};
        end
    endgenerate

    /* verilator lint_off UNUSEDSIGNAL */
    wire signed [SA_W+SB_W-1:0] wide = sa * sb;  // the top (SA_W + SB_W - P_W) bits are redundant copies
    /* verilator lint_on UNUSEDSIGNAL */
    wire [P_W-1:0] product = wide[P_W-1:0];

    wire [OUT_W-1:0] q;
    bf_requant #(
        .IN_W(P_W), .IN_FRAC(A_FRAC + B_FRAC), .IN_SIGNED(P_SIGNED),
        .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
        .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW)
    ) u_requant (.in_code(product), .out_code(q));

    generate
        if (OUT_REG != 0) begin : g_reg
            reg [OUT_W-1:0] p_q;
            always @(posedge clk) begin
                if (en) p_q <= q;
            end
            assign p = p_q;
        end else begin : g_comb
            assign p = q;
        end
    endgenerate
endmodule
`default_nettype wire
