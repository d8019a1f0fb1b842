// bf_relu: a stream stage computing requantize(max(x, 0)) for each of N codes (emulate: the ReLU rule).
//
// max(x, 0) of a signed code is its low IN_W - 1 bits, or zero when the sign bit is set: an unsigned value
// one bit narrower, which is what bf_requant_stage then sees (so no logic is spent on a sign that is known
// to be clear). A 1-bit signed input (-1 or 0) always gives 0. Unsigned inputs pass straight through.
// Latency REG cycles (default 1), II 1; valid/ready as bf_requant_stage.
`default_nettype none
module bf_relu #(
    parameter integer N = 1,
    parameter integer IN_W = 8,
    parameter integer IN_FRAC = 0,
    parameter integer IN_SIGNED = 1,
    parameter integer OUT_W = 8,
    parameter integer OUT_FRAC = 0,
    parameter integer OUT_SIGNED = 1,
    parameter integer OUT_ROUNDING = 0,
    parameter integer OUT_OVERFLOW = 0,
    parameter integer REG = 1
) (
    input  wire               clk,
    input  wire               rst,
    input  wire               in_valid,
    output wire               in_ready,
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire [N*IN_W-1:0]  in_data,  // a 1-bit signed input only ever gives 0
    /* verilator lint_on UNUSEDSIGNAL */
    output wire               out_valid,
    input  wire               out_ready,
    output wire [N*OUT_W-1:0] out_data
);
    // Width of the non-negative value handed to the requantizer.
    localparam integer P_W = (IN_SIGNED == 0) ? IN_W : (IN_W > 1 ? IN_W - 1 : 1);
    wire [N*P_W-1:0] pos;
    genvar i;
    generate
        for (i = 0; i < N; i = i + 1) begin : g_elem
            if (IN_SIGNED == 0) begin : g_unsigned
                assign pos[i*P_W +: P_W] = in_data[i*IN_W +: IN_W];
            end else if (IN_W > 1) begin : g_signed
                wire [IN_W-1:0] x = in_data[i*IN_W +: IN_W];
                assign pos[i*P_W +: P_W] = x[IN_W-1] ? {P_W{1'b0}} : x[IN_W-2:0];
            end else begin : g_one_bit
                assign pos[i*P_W +: P_W] = 1'b0;
            end
        end
    endgenerate

    bf_requant_stage #(
        .N(N), .IN_W(P_W), .IN_FRAC(IN_FRAC), .IN_SIGNED(0),
        .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
        .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW), .REG(REG)
    ) u_stage (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready), .in_data(pos),
               .out_valid(out_valid), .out_ready(out_ready), .out_data(out_data));
endmodule
`default_nettype wire
