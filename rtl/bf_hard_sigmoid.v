// bf_hard_sigmoid: a stream stage computing HardSigmoid, or HardSwish (SWISH = 1), per element
// (emulate.hard_sigmoid_fixed).
//
//   t = x * ALPHA + BETA_X       exact at F = X_FRAC + A_FRAC (BETA_X = beta_code << X_FRAC, aligned by the emitter)
//   h = min(max(t, 0), 2**F)     F + 1 bits, unsigned
//   y = requantize(h) from F                      (HardSigmoid)
//   y = requantize(x * h) from X_FRAC + F         (HardSwish: one variable multiply, bf_mul)
// ALPHA is a constant: bf_const_mul's shift-add graph (A_W <= 30). T_W (from the emitter) holds t exactly and
// 2**F + 1. Registers: h (and x, for the swish), then the output. Latency 2, II 1.
`default_nettype none
module bf_hard_sigmoid #(
    parameter integer N = 2,
    parameter integer X_W = 8,
    parameter integer X_FRAC = 4,
    parameter integer X_SIGNED = 1,
    parameter integer A_W = 8,
    parameter integer A_FRAC = 6,
    parameter integer A_SIGNED = 1,
    parameter [A_W-1:0] ALPHA = 8'h0d,
    parameter integer T_W = 18,
    parameter [T_W-1:0] BETA_X = 18'h200,
    parameter integer SWISH = 0,
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
    localparam integer F = X_FRAC + A_FRAC;
    localparam integer P_W = X_W + A_W;
    localparam [T_W-1:0] ONE = {{(T_W - 1){1'b0}}, 1'b1} << F;

    wire ce;
    bf_pipe_valid #(.LATENCY(2)) u_ctrl (.clk(clk), .rst(rst), .in_valid(in_valid), .in_ready(in_ready),
                                         .out_valid(out_valid), .out_ready(out_ready), .ce(ce));
    genvar i;
    generate
        for (i = 0; i < N; i = i + 1) begin : g_elem
            wire [X_W-1:0] x = in_data[i*X_W +: X_W];
            wire [P_W-1:0] p;
            bf_const_mul #(.A_W(X_W), .A_SIGNED(X_SIGNED), .C_W(A_W), .C_SIGNED(A_SIGNED), .C(ALPHA))
                u_mul (.a(x), .p(p));
            wire p_neg = (X_SIGNED != 0 || A_SIGNED != 0) ? p[P_W-1] : 1'b0;
            wire signed [T_W-1:0] t = $signed({{(T_W - P_W){p_neg}}, p}) + $signed(BETA_X);
            // The clamp's result is 0 .. 2**F, so only its low F + 1 bits are kept.
            /* verilator lint_off UNUSEDSIGNAL */
            wire [T_W-1:0] h = t[T_W-1] ? {T_W{1'b0}} : (t > $signed(ONE) ? ONE : t);
            /* verilator lint_on UNUSEDSIGNAL */
            reg [F:0] h_q;
            always @(posedge clk) if (ce) h_q <= h[F:0];
            wire [OUT_W-1:0] y;
            if (SWISH != 0) begin : g_swish
                reg [X_W-1:0] x_q;
                always @(posedge clk) if (ce) x_q <= x;
                bf_mul #(.A_W(X_W), .A_FRAC(X_FRAC), .A_SIGNED(X_SIGNED), .B_W(F + 1), .B_FRAC(F), .B_SIGNED(0),
                         .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
                         .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW), .OUT_REG(0))
                    u_swish (.clk(clk), .en(ce), .a(x_q), .b(h_q), .p(y));
            end else begin : g_sigmoid
                bf_requant #(
                    .IN_W(F + 1), .IN_FRAC(F), .IN_SIGNED(0),
                    .OUT_W(OUT_W), .OUT_FRAC(OUT_FRAC), .OUT_SIGNED(OUT_SIGNED),
                    .OUT_ROUNDING(OUT_ROUNDING), .OUT_OVERFLOW(OUT_OVERFLOW)
                ) u_out (.in_code(h_q), .out_code(y));
            end
            reg [OUT_W-1:0] y_q;
            always @(posedge clk) if (ce) y_q <= y;
            assign out_data[i*OUT_W +: OUT_W] = y_q;
        end
    endgenerate
endmodule
`default_nettype wire
