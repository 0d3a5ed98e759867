import time
def busy():
    t=time.perf_counter()
    while time.perf_counter()-t<0.05: pass
while True:
    busy(); time.sleep(0.05)
