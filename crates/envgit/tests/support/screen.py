"""What a person sees: the bytes on stdin (a terminal transcript) drawn by a real terminal
emulator (pyte), then the screen's rows printed one per line.

Usage: python3 screen.py COLUMNS ROWS < transcript

Character sets are honoured as terminals do in UTF-8 mode too (xterm, VTE, kitty: `ESC ( 0`
turns letters into line drawing), so the stream is read byte by byte, not as UTF-8.
"""

import sys

import pyte


def main() -> None:
    columns, rows = int(sys.argv[1]), int(sys.argv[2])
    screen = pyte.Screen(columns, rows)
    stream = pyte.ByteStream(screen)
    # pyte ignores charset designations in its UTF-8 mode; terminals do not.
    stream.select_other_charset("@")
    stream.feed(sys.stdin.buffer.read())
    for row in screen.display:
        print(row)


if __name__ == "__main__":
    main()
