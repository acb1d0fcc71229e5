"""What a person can send in one message, in the units they meet it in.

The turn refuses a text over ``MESSAGE_MAX_CHARS`` characters; a socket frame has room
for any such text however it is encoded (up to six bytes a character as a JSON escape),
so the frame limit is never the one a person meets. The chat page checks both before it
sends, with the same numbers.
"""

MESSAGE_MAX_CHARS = 32_000
FRAME_MAX_BYTES = 256 * 1024
