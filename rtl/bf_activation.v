// bf_activation: one code -> requantize(f(x)) in another type, combinational, f chosen by ACT:
//   ACT 0  f(x) = x            (requantize only: wires when the types are equal)
//   ACT 1  f(x) = max(x, 0)    (emulate's ReLU rule)
//
// max(x, 0) of a signed code is its low IN_W - 1 bits, or zero when the sign bit is set: an unsigned value
// one bit narrower, which is what bf_requant then sees (so no logic is spent on a sign that is known to be
// clear). A 1-bit signed input (-1 or 0) always gives 0. Unsigned inputs pass straight to the requantizer.
// Latency 0: bf_relu registers it as a stream stage; the dense modules apply it (ACT = 1) just before their
// output register, which is how a Dense -> ReLU pair becomes one stage with no register of its own.
`default_nettype none
module bf_activation #(
    parameter integer ACT = 1,
    parameter integer IN_W = 8,
    parameter integer IN_FRAC = 0,
    parameter integer IN_SIGNED = 1,
    parameter integer OUT_W = 8,
    parameter integer OUT_FRAC = 0,
    parameter integer OUT_SIGNED = 1,
    parameter integer OUT_ROUNDING = 0,
    parameter integer OUT_OVERFLOW = 0
) (
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire [IN_W-1:0]  in_code,  // a 1-bit signed input only ever gives 0
    /* verilator lint_on UNUSEDSIGNAL */
    output wire [OUT_W-1:0] out_code
);
    // Width of the non-negative value handed to the requantizer.
    localparam integer RELU = (ACT == 1 && IN_SIGNED != 0) ? 1 : 0;
    localparam integer P_W = RELU == 0 ? IN_W : (IN_W > 1 ? IN_W - 1 : 1);
    localparam integer P_SIGNED = RELU == 0 ? IN_SIGNED : 0;
    wire [P_W-1:0] pos;
    generate
        if (RELU == 0) begin : g_pass
            assign pos = in_code;
        end else if (IN_W > 1) begin : g_signed
            assign pos = in_code[IN_W-1] ? {P_W{1'b0}} : in_code[IN_W-2:0];
        end else begin : g_one_bit
            assign pos = 1'b0;
        end
    endgenerate

    bf_requant #(
        .IN_W(P_W), .IN_FRAC(IN_FRAC), .IN_SIGNED(P_SIGNED),
        .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
        .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW)
    ) u_requant (.in_code(pos), .out_code(out_code));
endmodule
`default_nettype wire
