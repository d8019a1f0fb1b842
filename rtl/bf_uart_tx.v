// bf_uart_tx: 8N1 UART transmitter, LSB first, exactly CLKS_PER_BIT clocks per bit (4 or more).
//
// A byte taken on a valid/ready handshake leaves as ten bits (start 0, data bit 0..7, stop 1), the start
// bit on the pin from the clock after the handshake. s_ready is high when the transmitter is idle and in
// the last clock of a stop bit: a byte offered while the previous one is going out is taken exactly as
// that one ends, so a continuous stream leaves back to back, 10*CLKS_PER_BIT clocks per byte with no idle
// bit in between. s_ready depends only on state, never on s_valid (AXI4-Stream). tx is a register, so the
// pin carries no combinational glitches.
`default_nettype none
module bf_uart_tx #(
    parameter integer CLKS_PER_BIT = 104
) (
    input  wire       clk,
    input  wire       rst,        // active-high synchronous
    input  wire       s_valid,
    output wire       s_ready,
    input  wire [7:0] s_data,
    output reg        tx,         // the pin, idle high
    output wire       busy        // a byte is being sent (start bit to the end of the stop bit)
);
    localparam integer CW = $clog2(CLKS_PER_BIT);
    /* verilator lint_off WIDTHTRUNC */
    localparam [CW-1:0] LAST = CLKS_PER_BIT - 1;
    /* verilator lint_on WIDTHTRUNC */

    generate
        if (CLKS_PER_BIT < 4) begin : g_bad_parameter
            // Verilog-2005 has no elaboration-time assertion: an instance of a module that does not exist
            // stops every tool with this name in its message.
            bf_uart_tx_needs_CLKS_PER_BIT_of_at_least_4 u_stop ();
        end
    endgenerate

    reg          active;
    reg [CW-1:0] cnt;     // clocks into the bit on the pin
    reg [3:0]    nbit;    // which bit is on the pin: 0 start, 1-8 data, 9 stop
    reg [8:0]    shreg;   // the bits still to send after the one on the pin, stop bit on top

    wire bit_end = cnt == LAST;
    assign s_ready = !active || (bit_end && nbit == 4'd9);
    assign busy = active;
    wire take = s_valid && s_ready;

    always @(posedge clk) begin
        if (rst) begin
            active <= 1'b0;
            tx <= 1'b1;
            cnt <= {CW{1'b0}};
            nbit <= 4'd0;
        end else if (take) begin
            active <= 1'b1;
            tx <= 1'b0;
            cnt <= {CW{1'b0}};
            nbit <= 4'd0;
        end else if (active) begin
            if (bit_end) begin
                cnt <= {CW{1'b0}};
                nbit <= nbit + 1'b1;
                if (nbit == 4'd9) begin
                    active <= 1'b0;  // the stop bit ended with nothing to send: idle (tx stays high)
                end else begin
                    tx <= shreg[0];
                end
            end else begin
                cnt <= cnt + 1'b1;
            end
        end
    end

    always @(posedge clk) begin
        if (take) shreg <= {1'b1, s_data};
        else if (active && bit_end) shreg <= {1'b1, shreg[8:1]};
    end
endmodule
`default_nettype wire
