/**
 * A pod annotation (or proxy setting) whose value cannot be used. Carries the annotation name and
 * the offending value so the CNI error names both; nothing is programmed when it is thrown.
 */
export class AnnotationError extends Error {
  readonly code = 'ERR_INVALID_ANNOTATION';
  readonly annotation: string;
  readonly value: string;

  constructor(annotation: string, value: string, reason: string) {
    super(`invalid annotation ${annotation}=${JSON.stringify(value)}: ${reason}`);
    this.name = 'AnnotationError';
    this.annotation = annotation;
    this.value = value;
  }
}
