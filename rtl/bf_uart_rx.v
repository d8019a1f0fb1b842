// bf_uart_rx: 8N1 UART receiver, LSB first, CLKS_PER_BIT clocks per bit (4 or more).
//
// The pin is asynchronous, so it passes a two-flop synchroniser before anything looks at it. From
// CLKS_PER_BIT >= 8 (MAJORITY=1 by default) the synchronised pin also goes through a median-of-3 filter:
// every value the state machine samples is then the majority of three consecutive samples around that
// point, which rejects a one-clock spike anywhere in a bit; at 4-7 clocks per bit three samples would be
// most of a bit, so the pin is sampled once.
//
// Timing, in clocks after the first low sample of a start bit (the falling edge):
//   * ceil(CPB/2): the start bit is checked again; high there means a glitch shorter than half a bit (such a
//     pulse cannot cover that many samples) and the receiver goes back to waiting for an edge;
//   * ceil(CPB/2) - 1 + k*CPB, k = 1..8: data bit k-1 is sampled, at its middle within half a clock (odd
//     CPB) or up to a clock early (even CPB: early leaves the most room for a faster transmitter's next
//     start bit). The start check is one clock later than this grid because a glitch of just under half
//     a bit can still cover ceil(CPB/2) - 1 clocks of samples;
//   * ceil(CPB/2) - 1 + 9*CPB: the middle of the stop bit. High: m_valid pulses for one clock with the byte
//     in m_data. Low: frame_err pulses for one clock and the byte is dropped. Either way the receiver
//     looks for the next start bit from the next clock on, half a bit before this frame's nominal end, so
//     a transmitter up to a few percent faster than CLKS_PER_BIT can send frames back to back.
//
// A start needs a falling edge: after reset and after a frame error the pin must be seen high first. A
// break (pin held low) therefore gives exactly one frame_err, then nothing until the line goes high again.
// No backpressure: a UART cannot be paused, so a byte that nobody takes is lost.
`default_nettype none
module bf_uart_rx #(
    parameter integer CLKS_PER_BIT = 104,
    parameter integer MAJORITY = CLKS_PER_BIT >= 8 ? 1 : 0
) (
    input  wire       clk,
    input  wire       rst,        // active-high synchronous
    input  wire       rx,         // the pin, idle high, asynchronous to clk
    output reg        m_valid,    // one-clock pulse per received byte
    output reg  [7:0] m_data,
    output reg        frame_err   // one-clock pulse: a byte whose stop bit was low (dropped)
);
    localparam integer CW = $clog2(CLKS_PER_BIT);
    /* verilator lint_off WIDTHTRUNC */
    localparam [CW-1:0] LAST = CLKS_PER_BIT - 1;                           // a bit's last clock count
    localparam [CW-1:0] CHECK = (CLKS_PER_BIT + 1) / 2 - 1;  // the start check: ceil(CPB/2) clocks in
    /* verilator lint_on WIDTHTRUNC */

    generate
        if (CLKS_PER_BIT < 4) begin : g_bad_parameter
            // Verilog-2005 has no elaboration-time assertion: an instance of a module that does not exist
            // stops every tool with this name in its message.
            bf_uart_rx_needs_CLKS_PER_BIT_of_at_least_4 u_stop ();
        end
    endgenerate

    localparam [1:0] S_IDLE = 2'd0, S_START = 2'd1, S_DATA = 2'd2, S_STOP = 2'd3;

    // The synchroniser's first flop may go metastable; nothing but the second flop reads it.
    (* ASYNC_REG = "TRUE" *) reg rx_meta;
    (* ASYNC_REG = "TRUE" *) reg rx_sync;
    always @(posedge clk) begin
        rx_meta <= rx;
        rx_sync <= rx_meta;
    end

    // line: what the state machine samples (the synchronised pin, or its median of three).
    reg line;
    generate
        if (MAJORITY != 0) begin : g_majority
            reg [1:0] hist;
            always @(posedge clk) begin
                if (rst) begin
                    hist <= 2'b11;
                    line <= 1'b1;
                end else begin
                    hist <= {hist[0], rx_sync};
                    line <= (hist[1] & hist[0]) | (hist[1] & rx_sync) | (hist[0] & rx_sync);
                end
            end
        end else begin : g_single
            always @(posedge clk) begin
                if (rst) line <= 1'b1;
                else line <= rx_sync;
            end
        end
    endgenerate

    reg [1:0]    state;
    reg [CW-1:0] cnt;     // clocks into the current bit (the start state: clocks since the edge, minus one)
    reg [2:0]    nbit;    // data bits received so far in this frame
    reg [7:0]    shreg;
    reg          armed;   // the line was high since the last frame error or reset: a low is a falling edge

    always @(posedge clk) begin
        if (rst) begin
            state <= S_IDLE;
            cnt <= {CW{1'b0}};
            nbit <= 3'd0;
            armed <= 1'b0;
            m_valid <= 1'b0;
            frame_err <= 1'b0;
        end else begin
            m_valid <= 1'b0;
            frame_err <= 1'b0;
            case (state)
                S_IDLE: begin
                    cnt <= {CW{1'b0}};
                    if (line) armed <= 1'b1;
                    else if (armed) state <= S_START;
                end
                S_START: begin
                    if (cnt == CHECK) begin
                        // The sampling grid is one clock before this check: data bit 0 is CPB - 1 clocks away.
                        cnt <= {{(CW-1){1'b0}}, 1'b1};
                        nbit <= 3'd0;
                        state <= line ? S_IDLE : S_DATA;
                    end else begin
                        cnt <= cnt + 1'b1;
                    end
                end
                S_DATA: begin
                    if (cnt == LAST) begin
                        cnt <= {CW{1'b0}};
                        nbit <= nbit + 1'b1;
                        if (nbit == 3'd7) state <= S_STOP;
                    end else begin
                        cnt <= cnt + 1'b1;
                    end
                end
                default: begin  // S_STOP
                    if (cnt == LAST) begin
                        cnt <= {CW{1'b0}};
                        m_valid <= line;
                        frame_err <= !line;
                        armed <= line;
                        state <= S_IDLE;
                    end else begin
                        cnt <= cnt + 1'b1;
                    end
                end
            endcase
        end
    end

    always @(posedge clk) begin
        if (state == S_DATA && cnt == LAST) shreg <= {line, shreg[7:1]};
        if (state == S_STOP && cnt == LAST && line) m_data <= shreg;
    end
endmodule
`default_nettype wire
