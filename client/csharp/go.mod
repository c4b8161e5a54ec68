module ticketing.invalid/client-csharp

go 1.26
