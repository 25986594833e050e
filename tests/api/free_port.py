# free_port.py: prints a TCP port free on 127.0.0.1 below 32768 (outside Linux's ephemeral
# range, so no outgoing connection takes it meanwhile), or nothing when none was found.
import random
import socket

for _ in range(200):
    p = random.randint(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
