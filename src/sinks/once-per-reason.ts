/** A failure retried in a loop is logged once per distinct reason, not at every attempt. */
export function oncePerReason<T>(log: (failure: T) => void, reasonOf: (failure: T) => string = String): (failure: T) => void {
  let last: string | undefined;
  return (failure) => {
    const reason = reasonOf(failure);
    if (reason !== last) log(failure);
    last = reason;
  };
}
