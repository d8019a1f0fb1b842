// Drives the board top (no PLL) around echo_device like a host's UART: one byte while the device is still in
// reset (it must be ignored), then bytes after reset, each of which must come back bit for bit with every bit
// CLKS_PER_BIT clocks long. Prints PASS or FAIL lines; `+vcd` dumps waves.
`timescale 1ns/1ps
`default_nettype none

module uart_echo_tb;
    parameter integer CLKS_PER_BIT = 16;
    parameter integer POR_CYCLES = 1023;
    parameter integer LED_ACTIVE_LOW = 1;
    reg clk = 1'b0;
    reg rx = 1'b1;
    wire tx, led;
    integer errors = 0;
    integer cycle = 0;

    `TOP dut (.clk(clk), .uart_rx(rx), .uart_tx(tx), .led(led));

    always #5 clk = !clk;
    always @(posedge clk) cycle = cycle + 1;  // the bench acts on falling edges: no race with it

    task send(input [7:0] value);
        integer i;
        begin
            rx = 1'b0;
            repeat (CLKS_PER_BIT) @(negedge clk);
            for (i = 0; i < 8; i = i + 1) begin
                rx = value[i];
                repeat (CLKS_PER_BIT) @(negedge clk);
            end
            rx = 1'b1;
            repeat (CLKS_PER_BIT) @(negedge clk);
        end
    endtask

    // Waits for a start bit, then samples each bit in its middle and checks the stop bit. The bit length is
    // checked on the first rising edge: it comes 1 + (the value's trailing zero bits) bits after the start edge.
    task expect_byte(input [7:0] value);
        integer i, t0, t1, timeout, low_bits;
        reg [7:0] got;
        begin
            timeout = 0;
            while (tx !== 1'b0 && timeout < 40 * CLKS_PER_BIT) begin
                @(negedge clk);
                timeout = timeout + 1;
            end
            if (tx !== 1'b0) begin
                $display("FAIL: no start bit for 0x%02h", value);
                errors = errors + 1;
            end else begin
                t0 = cycle;
                low_bits = 1;
                while (low_bits < 9 && !value[low_bits - 1]) low_bits = low_bits + 1;
                fork
                    begin
                        repeat (CLKS_PER_BIT + CLKS_PER_BIT / 2) @(negedge clk);
                        for (i = 0; i < 8; i = i + 1) begin
                            got[i] = tx;
                            repeat (CLKS_PER_BIT) @(negedge clk);
                        end
                    end
                    begin
                        @(negedge clk);
                        while (tx !== 1'b1) @(negedge clk);
                        t1 = cycle;
                    end
                join
                if (tx !== 1'b1) begin
                    $display("FAIL: stop bit of 0x%02h is %b", value, tx);
                    errors = errors + 1;
                end
                if (got !== value) begin
                    $display("FAIL: sent 0x%02h, echoed 0x%02h", value, got);
                    errors = errors + 1;
                end
                if (t1 - t0 != low_bits * CLKS_PER_BIT) begin
                    $display("FAIL: 0x%02h: the line rose %0d clocks after the start edge, expected %0d (%0d bits)",
                             value, t1 - t0, low_bits * CLKS_PER_BIT, low_bits);
                    errors = errors + 1;
                end
            end
        end
    endtask

    initial begin
        if ($test$plusargs("vcd")) begin
            $dumpfile("uart_echo_tb.vcd");
            $dumpvars(0, uart_echo_tb);
        end
    end

    initial begin : run
        integer idle_low;
        // In reset: a byte sent now must not come back, and the line must stay idle (high).
        idle_low = 0;
        fork
            send(8'h5a);
            begin
                repeat (10 * CLKS_PER_BIT) begin
                    @(negedge clk);
                    if (tx !== 1'b1) idle_low = idle_low + 1;
                end
            end
        join
        if (idle_low != 0) begin
            $display("FAIL: uart_tx left idle during reset (%0d clocks low or unknown)", idle_low);
            errors = errors + 1;
        end
        if (10 * CLKS_PER_BIT + 4 >= POR_CYCLES) begin
            $display("FAIL: the test needs POR_CYCLES > %0d", 10 * CLKS_PER_BIT + 4);
            errors = errors + 1;
        end
        if (led !== (LED_ACTIVE_LOW ? 1'b1 : 1'b0)) begin
            $display("FAIL: led is %b in reset (device not busy)", led);
            errors = errors + 1;
        end
        while (cycle < POR_CYCLES + 8) @(negedge clk);
        if (tx !== 1'b1) begin
            $display("FAIL: uart_tx is %b after reset", tx);
            errors = errors + 1;
        end
        fork
            send(8'ha5);
            expect_byte(8'ha5);
        join
        fork
            begin
                send(8'h00);
                send(8'hff);
                send(8'h3c);
            end
            begin
                expect_byte(8'h00);
                expect_byte(8'hff);
                expect_byte(8'h3c);
            end
            begin
                repeat (CLKS_PER_BIT) @(negedge clk);
                if (led !== (LED_ACTIVE_LOW ? 1'b0 : 1'b1)) begin
                    $display("FAIL: led is %b while the device is busy", led);
                    errors = errors + 1;
                end
            end
        join
        if (errors == 0) $display("PASS");
        $finish;
    end
endmodule

`default_nettype wire
