// Twelve parallel registered signed 16x16 multipliers behind a serial board top: more multipliers than the
// eight SB_MAC16 blocks of an iCE40 UP5K, so the flow must refuse it before place and route.
module mac12_top (
    input  wire clk,
    input  wire rst,
    input  wire sin,
    output reg  sout
);
    localparam N = 12;
    reg [16*N+15:0] sh;
    wire [32*N-1:0] products;

    genvar k;
    generate
        for (k = 0; k < N; k = k + 1) begin : g_mul
            reg signed [31:0] p;
            always @(posedge clk) p <= $signed(sh[16*k +: 16]) * $signed(sh[16*k+16 +: 16]);
            assign products[32*k +: 32] = p;
        end
    endgenerate

    always @(posedge clk) begin
        if (rst) begin
            sh <= 0;
            sout <= 1'b0;
        end else begin
            sh <= {sh[16*N+14:0], sin};
            sout <= ^products;
        end
    end
endmodule
