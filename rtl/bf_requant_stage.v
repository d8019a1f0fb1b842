// bf_requant_stage: a stream stage that requantizes each of N codes (emulate: fixed.requantize).
//
// Element i of in_data ([i*IN_W +: IN_W]) becomes element i of out_data ([i*OUT_W +: OUT_W]) through
// bf_requant, bit-exact with fixed.requantize for every rounding and overflow mode. Latency REG cycles
// (1 by default: the result is registered; 0 makes the stage a wire, for chains that are registered
// elsewhere), II 1. Valid/ready per stages.py: advance = !out_valid || out_ready, in_ready = advance.
`default_nettype none
module bf_requant_stage #(
    parameter integer N = 1,
    parameter integer IN_W = 16,
    parameter integer IN_FRAC = 8,
    parameter integer IN_SIGNED = 1,
    parameter integer OUT_W = 8,
    parameter integer OUT_FRAC = 4,
    parameter integer OUT_SIGNED = 1,
    parameter integer OUT_ROUNDING = 0,
    parameter integer OUT_OVERFLOW = 0,
    parameter integer REG = 1
) (
    /* verilator lint_off UNUSEDSIGNAL */
    input  wire               clk,  // unused when REG = 0
    input  wire               rst,
    /* verilator lint_on UNUSEDSIGNAL */
    input  wire               in_valid,
    output wire               in_ready,
    input  wire [N*IN_W-1:0]  in_data,
    output wire               out_valid,
    input  wire               out_ready,
    output wire [N*OUT_W-1:0] out_data
);
    wire [N*OUT_W-1:0] y;
    genvar i;
    generate
        for (i = 0; i < N; i = i + 1) begin : g_elem
            bf_requant #(
                .IN_W(IN_W), .IN_FRAC(IN_FRAC), .IN_SIGNED(IN_SIGNED),
                .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
                .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW)
            ) u_requant (.in_code(in_data[i*IN_W +: IN_W]), .out_code(y[i*OUT_W +: OUT_W]));
        end
        if (REG != 0) begin : g_reg
            wire advance = !out_valid || out_ready;
            reg valid_q;
            reg [N*OUT_W-1:0] data_q;
            always @(posedge clk) begin
                if (rst) valid_q <= 1'b0;
                else if (advance) valid_q <= in_valid;
            end
            always @(posedge clk) begin
                if (advance) data_q <= y;
            end
            assign in_ready = advance;
            assign out_valid = valid_q;
            assign out_data = data_q;
        end else begin : g_wire
            assign in_ready = out_ready;
            assign out_valid = in_valid;
            assign out_data = y;
        end
    endgenerate
endmodule
`default_nettype wire
