"""How the host talks to a kernel: its channels (zmq, or a gateway's websocket), the signed
wire codec, the frames a large value arrives in, and the opt-in socket carrier for tool
calls. Nothing here knows what a run is."""
