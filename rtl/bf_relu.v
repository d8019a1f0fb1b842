// bf_relu: a stream stage computing requantize(max(x, 0)) for each of N codes (emulate: the ReLU rule).
//
// Each element goes through bf_activation (ACT 1); the registered stream stage is bf_requant_stage with an
// identity type (no logic, just its register and valid/ready). Latency REG cycles (default 1), II 1.
// The RTL backend only builds this stage for a ReLU that does not follow a dense layer: after one, the
// ReLU is fused into the dense module's output (ACT = 1).
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
    input  wire [N*IN_W-1:0]  in_data,
    output wire               out_valid,
    input  wire               out_ready,
    output wire [N*OUT_W-1:0] out_data
);
    wire [N*OUT_W-1:0] y;
    genvar i;
    generate
        for (i = 0; i < N; i = i + 1) begin : g_elem
            bf_activation #(
                .ACT(1), .IN_W(IN_W), .IN_FRAC(IN_FRAC), .IN_SIGNED(IN_SIGNED),
                .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
                .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW)
            ) u_elem (.in_code(in_data[i*IN_W +: IN_W]), .out_code(y[i*OUT_W +: OUT_W]));
        end
    endgenerate

    bf_requant_stage #(
        .N(N), .IN_W(OUT_W), .IN_FRAC(OUT_FRAC), .IN_SIGNED(OUT_SIGNED),
        .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED), .REG(REG)
    ) u_stage (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready), .in_data(y),
               .out_valid(out_valid), .out_ready(out_ready), .out_data(out_data));
endmodule
`default_nettype wire
