"""An SMTP server for the email tests (aiosmtpd): listens on 127.0.0.1 (a free port,
printed on the first line of stdout) and writes each message it receives to DIR as
`<n>.json`: `{"from", "to", "data"}`.

Usage: python smtp_sink.py DIR
"""

import asyncio
import json
import os
import sys

from aiosmtpd.smtp import SMTP

OUT = sys.argv[1]


class Keep:
    def __init__(self):
        self.count = 0

    async def handle_DATA(self, server, session, envelope):
        self.count += 1
        mail = {"from": envelope.mail_from, "to": envelope.rcpt_tos, "data": envelope.content.decode("utf8", "replace")}
        path = os.path.join(OUT, f"{self.count}.json")
        with open(path + ".part", "w") as f:
            json.dump(mail, f)
        os.replace(path + ".part", path)
        return "250 Message accepted for delivery"


async def main():
    keep = Keep()
    server = await asyncio.get_running_loop().create_server(lambda: SMTP(keep), "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


asyncio.run(main())
