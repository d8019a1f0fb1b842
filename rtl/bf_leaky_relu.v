// bf_leaky_relu: a stream stage computing LeakyReLU / PReLU per element (emulate.leaky_relu_fixed).
//
//   v = x * 2**A_FRAC           where x >= 0
//   v = x * ALPHA[c]            where x < 0, c = i / SPAN (one slope per channel; C = 1 and SPAN = N: one slope)
// Both are exact at X_FRAC + A_FRAC fractional bits; bf_requant then rounds and overflows v into the output
// type, as requantize_exact does. The slopes are constants: bf_const_mul's shift-add graphs (A_W <= 30), no
// DSP block. An unsigned input is never negative: the stage is then a requantize and builds no multiplier.
// Registers: v (V_W bits, wide enough for either branch), then the output. Latency 2, II 1.
`default_nettype none
module bf_leaky_relu #(
    parameter integer N = 2,
    parameter integer C = 1,
    parameter integer SPAN = 2,
    parameter integer X_W = 8,
    parameter integer X_FRAC = 0,
    parameter integer X_SIGNED = 1,
    parameter integer A_W = 8,
    parameter integer A_FRAC = 4,
    parameter integer A_SIGNED = 1,
    parameter [C*A_W-1:0] ALPHA = {C{8'h02}},
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
    localparam integer P_W = X_W + A_W;                       // the exact product
    localparam integer K_W = X_W + A_FRAC;                     // x shifted to the product's frac
    localparam integer V_W = (P_W > K_W ? P_W : K_W) + 1;      // either, signed, with a bit to spare

    wire ce;
    bf_pipe_valid #(.LATENCY(2)) u_ctrl (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready),
                                         .out_valid(out_valid), .out_ready(out_ready), .ce(ce));
    genvar i;
    generate
        for (i = 0; i < N; i = i + 1) begin : g_elem
            localparam integer CH = i / SPAN;
            wire [X_W-1:0] x = in_data[i*X_W +: X_W];
            wire [V_W-1:0] v;
            // x << A_FRAC, sign- or zero-extended to V_W bits
            wire [V_W-1:0] x_ext = {{(V_W - X_W){X_SIGNED != 0 ? x[X_W-1] : 1'b0}}, x};
            wire [V_W-1:0] pos = x_ext << A_FRAC;
            if (X_SIGNED != 0) begin : g_signed
                wire [P_W-1:0] p;
                bf_const_mul #(.A_W(X_W), .A_SIGNED(1), .C_W(A_W), .C_SIGNED(A_SIGNED), .C(ALPHA[CH*A_W +: A_W]))
                    u_mul (.a(x), .p(p));
                wire [V_W-1:0] neg = {{(V_W - P_W){p[P_W-1]}}, p};  // signed: x is
                assign v = x[X_W-1] ? neg : pos;
            end else begin : g_unsigned
                assign v = pos;
            end
            reg [V_W-1:0] v_q;
            always @(posedge clk) if (ce) v_q <= v;
            wire [OUT_W-1:0] y;
            bf_requant #(
                .IN_W(V_W), .IN_FRAC(X_FRAC + A_FRAC), .IN_SIGNED(1),
                .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
                .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW)
            ) u_out (.in_code(v_q), .out_code(y));
            reg [OUT_W-1:0] y_q;
            always @(posedge clk) if (ce) y_q <= y;
            assign out_data[i*OUT_W +: OUT_W] = y_q;
        end
    endgenerate
endmodule
`default_nettype wire
