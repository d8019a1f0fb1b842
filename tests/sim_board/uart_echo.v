// Test fixture for the simulated board (tests/test_sim_board.py): a UART device with the ports of bitforge's
// device top (clk, rst, uart_rx, uart_tx, busy, CLKS_PER_BIT) and no protocol at all, so that the harness is
// tested on its own.
//
// STAMP = 0: every received byte is sent back unchanged, DELAY cycles after it arrived (busy high meanwhile).
//            Received bytes wait in a 256-deep FIFO, and the transmitter starts the next frame in the cycle its
//            previous stop bit ends, so a back-to-back stream is echoed at line rate without loss.
// STAMP = 1: a received byte 0xF0 is answered (after DELAY cycles) by one frame with a low stop bit, then a
//            0x55 frame; any other byte by the number of clock cycles since the previous byte arrived (32 bits,
//            little-endian, saturating; counted from reset for the first byte).
// Behavioural Verilog for Verilator: the receiver samples each bit in its middle, like the harness's decoder;
// CLKS_PER_BIT must be at least 2.
module uart_echo #(
    parameter integer CLKS_PER_BIT = 16,
    parameter integer DELAY = 0,
    parameter integer STAMP = 0
) (
    input  wire clk,
    input  wire rst,
    input  wire uart_rx,
    output reg  uart_tx,
    output wire busy
);
    // ---- receiver --------------------------------------------------------------------------------------------
    reg [1:0]  rx_sync;
    reg        rx_active;
    reg [31:0] rx_count;
    reg [3:0]  rx_bit;
    reg [7:0]  rx_shift;
    reg        rx_valid;  // one cycle: rx_shift holds a complete byte
    wire       rx_line = rx_sync[1];

    always @(posedge clk) begin
        rx_valid <= 1'b0;
        if (rst) begin
            rx_sync <= 2'b11;
            rx_active <= 1'b0;
        end else begin
            rx_sync <= {rx_sync[0], uart_rx};
            if (!rx_active) begin
                if (!rx_line) begin
                    rx_active <= 1'b1;
                    rx_count <= 0;
                    rx_bit <= 0;
                end
            end else if (rx_count == (rx_bit == 0 ? CLKS_PER_BIT / 2 : CLKS_PER_BIT) - 1) begin  // mid-bit
                rx_count <= 0;
                rx_bit <= rx_bit + 1;
                if (rx_bit == 0 && rx_line) rx_active <= 1'b0;  // a glitch, not a start bit
                if (rx_bit >= 1 && rx_bit <= 8) rx_shift <= {rx_line, rx_shift[7:1]};
                if (rx_bit == 9) begin
                    rx_active <= 1'b0;
                    rx_valid <= rx_line;  // a low stop bit drops the byte
                end
            end else begin
                rx_count <= rx_count + 1;
            end
        end
    end

    // ---- cycle stamp -----------------------------------------------------------------------------------------
    reg [31:0] since;  // cycles since the previous received byte
    always @(posedge clk) begin
        if (rst || rx_valid) since <= 0;
        else if (since != 32'hFFFFFFFF) since <= since + 1;
    end

    // ---- FIFO of bytes to send (each entry: 8 data bits + a "bad stop bit" flag) -----------------------------
    reg [8:0] fifo [0:255];
    reg [7:0] wr_ptr, rd_ptr;
    reg [8:0] count;
    reg [2:0] push_n;       // bytes of the current reply still to push
    reg [31:0] wait_count;  // DELAY countdown before the reply is pushed
    reg        waiting;
    reg [7:0]  got;
    reg [31:0] got_since;

    wire pop;
    wire [8:0] push_word = STAMP == 0 ? {1'b0, got}
                         : got == 8'hF0 ? (push_n == 2 ? {1'b1, 8'hA5} : {1'b0, 8'h55})
                         : {1'b0, got_since[8 * (4 - push_n) +: 8]};
    wire push = !waiting && push_n != 0 && count != 256;

    always @(posedge clk) begin
        if (rst) begin
            wr_ptr <= 0;
            rd_ptr <= 0;
            count <= 0;
            push_n <= 0;
            waiting <= 1'b0;
        end else begin
            if (rx_valid && push_n == 0 && !waiting) begin
                got <= rx_shift;
                got_since <= since;
                waiting <= DELAY != 0;
                wait_count <= DELAY;
                push_n <= STAMP == 0 ? 1 : rx_shift == 8'hF0 ? 2 : 4;
            end
            if (waiting) begin
                if (wait_count <= 1) waiting <= 1'b0;
                wait_count <= wait_count - 1;
            end
            if (push) begin
                fifo[wr_ptr] <= push_word;
                wr_ptr <= wr_ptr + 1;
                push_n <= push_n - 1;
            end
            if (pop) rd_ptr <= rd_ptr + 1;
            count <= count + {8'd0, push} - {8'd0, pop};
        end
    end

    // A byte arriving while the previous reply is still being pushed (or delayed) is dropped; without DELAY it
    // cannot happen: a push takes a cycle per reply byte and bytes arrive 10 * CLKS_PER_BIT cycles apart.

    // ---- transmitter -----------------------------------------------------------------------------------------
    reg        tx_active;
    reg [9:0]  tx_frame;
    reg [3:0]  tx_bit;
    reg [31:0] tx_count;
    reg [31:0] tx_gap;   // idle cycles after a bad frame, so the receiver sees the line high again
    wire tx_done = tx_active && tx_bit == 9 && tx_count == CLKS_PER_BIT - 1;
    // The next frame starts in the cycle the previous stop bit ends (back to back), except after a bad frame.
    assign pop = count != 0 && tx_gap == 0 && (!tx_active || (tx_done && tx_frame[9]));

    always @(posedge clk) begin
        if (rst) begin
            uart_tx <= 1'b1;
            tx_active <= 1'b0;
            tx_gap <= 0;
        end else begin
            if (tx_gap != 0) tx_gap <= tx_gap - 1;
            if (pop) begin
                // start bit now; the frame's stop bit is low when the entry's flag is set
                tx_frame <= {~fifo[rd_ptr][8], fifo[rd_ptr][7:0], 1'b0};
                uart_tx <= 1'b0;
                tx_active <= 1'b1;
                tx_bit <= 0;
                tx_count <= 0;
            end else if (tx_active) begin
                if (tx_count == CLKS_PER_BIT - 1) begin
                    tx_count <= 0;
                    if (tx_bit == 9) begin
                        tx_active <= 1'b0;
                        uart_tx <= 1'b1;
                        if (!tx_frame[9]) tx_gap <= 2 * CLKS_PER_BIT;
                    end else begin
                        tx_bit <= tx_bit + 1;
                        uart_tx <= tx_frame[tx_bit + 1];
                    end
                end else begin
                    tx_count <= tx_count + 1;
                end
            end
        end
    end

    assign busy = rx_active || waiting || push_n != 0 || count != 0 || tx_active || tx_gap != 0;
endmodule
