// bf_scale_shift: a stream stage computing y = x * scale[c] + shift[c] per element (emulate.scale_shift_fixed).
//
// Element i belongs to channel c = i / SPAN (channels-first tensors: SPAN elements per channel). Bit-exact
// with the golden model: the product x * SCALE[c] is exact (X_W + S_W bits, frac X_FRAC + S_FRAC = ACC_FRAC),
// the shift code is aligned to ACC_FRAC and added exactly, the accumulator's overflow (ACC_*) acts on that
// sum, then bf_requant rounds and overflows into the output type: bf_bias_requant, the end of a dense output.
// The scales are constants, so each product is bf_const_mul's shift-add graph of the scale's signed digits
// (no DSP block; S_W <= 30). Registers: the product, then the output (bf_pipe_valid's stall control).
// Latency 2, II 1.
`default_nettype none
module bf_scale_shift #(
    parameter integer N = 2,
    parameter integer C = 1,
    parameter integer SPAN = 2,
    parameter integer X_W = 8,
    parameter integer X_SIGNED = 1,
    parameter integer S_W = 8,
    parameter integer S_SIGNED = 1,
    parameter [C*S_W-1:0] SCALE = {C{{(S_W-1){1'b0}}, 1'b1}},
    parameter integer HAS_SHIFT = 0,
    parameter integer H_W = 8,
    parameter integer H_FRAC = 0,
    parameter integer H_SIGNED = 1,
    parameter [C*H_W-1:0] SHIFT = {C*H_W{1'b0}},
    parameter integer ACC_W = 16,
    parameter integer ACC_FRAC = 0,
    parameter integer ACC_SIGNED = 1,
    parameter integer ACC_OVERFLOW = 0,
    parameter integer OUT_W = 8,
    parameter integer OUT_FRAC = 0,
    parameter integer OUT_SIGNED = 1,
    parameter integer OUT_ROUNDING = 0,
    parameter integer OUT_OVERFLOW = 0
) (
    input  wire               clk,
    input  wire               rst,
    input  wire               in_valid,
    output wire               in_ready,
    input  wire [N*X_W-1:0]   in_data,
    output wire               out_valid,
    input  wire               out_ready,
    output wire [N*OUT_W-1:0] out_data
);
    localparam integer P_W = X_W + S_W;
    localparam integer P_SIGNED = (X_SIGNED != 0 || S_SIGNED != 0) ? 1 : 0;

    wire ce;
    bf_pipe_valid #(.LATENCY(2)) u_ctrl (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready),
                                         .out_valid(out_valid), .out_ready(out_ready), .ce(ce));
    genvar i;
    generate
        for (i = 0; i < N; i = i + 1) begin : g_elem
            localparam integer CH = i / SPAN;
            wire [P_W-1:0] p;
            bf_const_mul #(.A_W(X_W), .A_SIGNED(X_SIGNED), .C_W(S_W), .C_SIGNED(S_SIGNED),
                           .C(SCALE[CH*S_W +: S_W]))
                u_mul (.a(in_data[i*X_W +: X_W]), .p(p));
            reg [P_W-1:0] p_q;
            always @(posedge clk) if (ce) p_q <= p;
            wire [OUT_W-1:0] y;
            bf_bias_requant #(
                .SUM_W(P_W), .SUM_SIGNED(P_SIGNED), .HAS_BIAS(HAS_SHIFT),
                .B_W(H_W), .B_FRAC(H_FRAC), .B_SIGNED(H_SIGNED), .BIAS(SHIFT[CH*H_W +: H_W]),
                .ACC_W(ACC_W), .ACC_FRAC(ACC_FRAC), .ACC_SIGNED(ACC_SIGNED), .ACC_OVERFLOW(ACC_OVERFLOW),
                .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
                .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW)
            ) u_tail (.sum(p_q), .out_code(y));
            reg [OUT_W-1:0] y_q;
            always @(posedge clk) if (ce) y_q <= y;
            assign out_data[i*OUT_W +: OUT_W] = y_q;
        end
    endgenerate
endmodule
`default_nettype wire
