// A registered signed 16x16 multiply-accumulate behind a serial board top.
// mac_top has four pins (clk, rst, sin, sout) so it fits any package: operands are shifted in one bit per
// cycle and the accumulator is shifted out, which keeps every multiplier bit observable (nothing is pruned).
module mac #(
    parameter W = 16,
    parameter ACC = 40
) (
    input  wire                  clk,
    input  wire                  rst,
    input  wire signed [W-1:0]   a,
    input  wire signed [W-1:0]   b,
    output reg  signed [ACC-1:0] acc
);
    reg signed [W-1:0] a_r, b_r;
    reg signed [2*W-1:0] p_r;
    always @(posedge clk) begin
        if (rst) begin
            a_r <= 0;
            b_r <= 0;
            p_r <= 0;
            acc <= 0;
        end else begin
            a_r <= a;
            b_r <= b;
            p_r <= a_r * b_r;
            acc <= acc + {{(ACC-2*W){p_r[2*W-1]}}, p_r};
        end
    end
endmodule

module mac_top (
    input  wire clk,
    input  wire rst,
    input  wire sin,
    output wire sout
);
    reg [31:0] in_sh;
    reg [39:0] out_sh;
    reg [5:0]  count;
    wire signed [39:0] acc;

    mac #(.W(16), .ACC(40)) u_mac (.clk(clk), .rst(rst), .a(in_sh[15:0]), .b(in_sh[31:16]), .acc(acc));

    always @(posedge clk) begin
        if (rst) begin
            in_sh <= 0;
            out_sh <= 0;
            count <= 0;
        end else begin
            in_sh <= {in_sh[30:0], sin};
            count <= (count == 6'd39) ? 6'd0 : count + 6'd1;
            out_sh <= (count == 6'd39) ? acc : {out_sh[38:0], 1'b0};
        end
    end
    assign sout = out_sh[39];
endmodule
