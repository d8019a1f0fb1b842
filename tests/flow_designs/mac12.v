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
    reg [31:0] p [0:N-1];
    reg [31:0] x;
    integer k;
    always @(posedge clk) begin
        if (rst) begin
            sh <= 0;
            sout <= 0;
        end else begin
            sh <= {sh[16*N+14:0], sin};
            sout <= ^x;
        end
    end
    always @(posedge clk) begin
        for (k = 0; k < N; k = k + 1)
            p[k] <= $signed(sh[16*k +: 16]) * $signed(sh[16*k+16 +: 16]);
    end
    always @(*) begin
        x = 0;
        for (k = 0; k < N; k = k + 1)
            x = x ^ p[k];
    end
endmodule
